"""The PEP 517 build backend: setuptools' own, plus the nvidia wheels as build requirements
when SHARDWISE_CUDA=1, and the mpich wheel when SHARDWISE_MPI=1.

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

MPI likewise: `SHARDWISE_MPI=1 pip install ".[mpi]"` puts the mpich wheel (tools/build_mpi.py's
MPI_WHEELS, the [mpi] extra) in the build environment, whose bin/mpicc pip puts on PATH; the
extra installs the same wheel into the target environment for run time, where shardwise._mpi's
rpath ($ORIGIN/../../.., the environment's lib/) finds libmpi.  pip does not tell a backend which
extras were asked for, hence the variable.  With SHARDWISE_MPI=auto (the default) nothing is
added: the build uses an mpicc it finds (the target environment's bin/, then PATH) or skips MPI.
"""
import os

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (every hook setuptools defines)

# the libraries the CUDA backend links against (NCCL: its communicator between GPU ranks)
# (keep equal to pyproject.toml's [cuda] extra; tests/gpu/test_cuda_build.py checks)
CUDA_WHEELS = ["nvidia-cudnn-cu13>=9.0,<10", "nvidia-cublas>=13.0,<14", "nvidia-nccl-cu13>=2.27,<3"]


# the MPI the [mpi] extra installs (keep equal to pyproject.toml's [mpi] and tools/build_mpi.py's MPI_WHEELS)
MPI_WHEELS = ["mpich>=4.3"]


def _cuda_required():
    return os.environ.get("SHARDWISE_CUDA", "auto").strip() == "1"


def _mpi_required():
    return os.environ.get("SHARDWISE_MPI", "auto").strip() == "1"


def _extra():
    return (CUDA_WHEELS if _cuda_required() else []) + (MPI_WHEELS if _mpi_required() else [])


def get_requires_for_build_wheel(config_settings=None):
    return _orig.get_requires_for_build_wheel(config_settings) + _extra()


def get_requires_for_build_editable(config_settings=None):
    return _orig.get_requires_for_build_editable(config_settings) + _extra()
