"""The PEP 517 build backend: setuptools' own, plus the nvidia wheels as build requirements
when SHARDWISE_CUDA=1.

pip builds a package in an isolated environment that holds only its build requirements, and
it installs an extra's dependencies (the [cuda] extra's nvidia wheels) after the build.  So
`pip install ".[cuda]"` alone compiles no CUDA on a machine that has no wheels yet: the
build cannot see them.  `SHARDWISE_CUDA=1 pip install ".[cuda]"` asks for them here, for the
build (headers to compile against, libraries to link), and the extra installs them beside the
package for run time (setup.py embeds their place, relative to the module, as its rpath).

The requirement hooks run setup.py (setuptools asks it for its own requirements) before pip has
installed what they return, so setup.py must not demand cuDNN then: with SHARDWISE_CUDA=1 it
only reports what it has not found yet, and its build_ext fails if it is still missing when
the extensions are compiled (tools/build_cuda.py, BuildExt.run).
"""
import os

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (every hook setuptools defines)

# the libraries the CUDA backend links against, and NCCL whose version it records
# (keep equal to pyproject.toml's [cuda] extra; tests/gpu/test_cuda_build.py checks)
CUDA_WHEELS = ["nvidia-cudnn-cu13>=9.0,<10", "nvidia-cublas>=13.0,<14", "nvidia-nccl-cu13>=2.27,<3"]


def _cuda_required():
    return os.environ.get("SHARDWISE_CUDA", "auto").strip() == "1"


def get_requires_for_build_wheel(config_settings=None):
    extra = CUDA_WHEELS if _cuda_required() else []
    return _orig.get_requires_for_build_wheel(config_settings) + extra


def get_requires_for_build_editable(config_settings=None):
    extra = CUDA_WHEELS if _cuda_required() else []
    return _orig.get_requires_for_build_editable(config_settings) + extra
