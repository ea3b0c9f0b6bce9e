"""torchvision (and packages that import it, such as transformers' model classes) where its
compiled ops do not match the installed torch: a CUDA wheel of torchvision beside a CPU torch,
whose registration of its detection ops' fake kernels fails at import."""
from __future__ import annotations

import sys


def import_torchvision():
    """torchvision, its detection ops' fake-kernel registration skipped where it fails (the
    models need none of those ops).  ImportError where torchvision is not installed."""
    try:
        import torchvision
        return torchvision
    except RuntimeError:
        import torch.library

        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        register = torch.library.register_fake
        torch.library.register_fake = lambda *args, **kwargs: (lambda f: f)
        try:
            import torchvision
        finally:
            torch.library.register_fake = register
        return torchvision


def import_transformers():
    """transformers (the test is skipped where it or torch is missing), with torchvision's
    workaround first: its model classes import torchvision when it is installed."""
    import pytest

    pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    try:
        import_torchvision()
    except ImportError:
        pass
    return pytest.importorskip("transformers", reason="transformers not installed: pip install transformers")
