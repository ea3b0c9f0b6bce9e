"""Load OpenBLAS (the scipy-openblas32 wheel) before the C extension.

The extension records two rpaths to find libscipy_openblas.so: one relative to
an installed package and the build machine's path.  Neither holds for every
install (an editable install built in pip's isolated environment points at a
deleted temporary directory).  Loading the library by absolute path first,
with RTLD_GLOBAL, makes the dynamic linker reuse it for the extension's
DT_NEEDED entry whatever the rpaths say.
"""
from __future__ import annotations

import ctypes
import os


def preload_openblas() -> None:
    """Load libscipy_openblas from the installed wheel; silent if it is absent.

    When the wheel is missing the extension's own import fails with the
    linker's message, which names the library.
    """
    try:
        import scipy_openblas32
    except ImportError:
        return
    path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    if os.path.exists(path):
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
