"""Build of the C extension shardwise._core (CPython C API + NumPy C API + OpenBLAS), and of the
CUDA backend shardwise._cuda when nvcc and the CUDA libraries are found.

GEMM comes from OpenBLAS as NumPy and SciPy ship it: the scipy-openblas32
wheel (a build and runtime dependency), whose symbols carry a ``scipy_``
prefix.  The extension finds the library through an rpath next to itself in
site-packages (and the build-time location for in-place builds).

The CUDA backend (cuda/) is a second extension module, so that ``import shardwise`` never
needs a CUDA library: SHARDWISE_CUDA=auto (the default) builds it when nvcc and the cuDNN
and cuBLAS headers and libraries are found and otherwise prints why it skipped it;
SHARDWISE_CUDA=1 requires it (the build fails naming what is missing); SHARDWISE_CUDA=0
never builds it.  tools/build_cuda.py finds the toolkit and libraries and compiles the .cu
files.

The MPI communicator (csrc/mpi/, the extension module shardwise._mpi) is built the same way:
SHARDWISE_MPI=auto (the default) builds it when an MPI compiler wrapper `mpicc` is found (the
[mpi] extra's mpich wheel puts one in the environment's bin/), SHARDWISE_MPI=1 requires it,
SHARDWISE_MPI=0 never builds it; tools/build_mpi.py finds it.  The core never links MPI.
"""
import os
import sys
from glob import glob

import numpy
import scipy_openblas32
from setuptools import Extension, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import build_cuda  # noqa: E402  (tools/build_cuda.py: finding CUDA, compiling .cu files)
import build_mpi  # noqa: E402  (tools/build_mpi.py: finding MPI through mpicc -show)
import core_sources  # noqa: E402  (tools/core_sources.py: the C core's files, in build order)

ROOMS = core_sources.ROOMS
SOURCES = core_sources.core_sources()
BLAS_LIB_DIR = scipy_openblas32.get_lib_dir()
EXTRA = list(core_sources.COMPILE_ARGS)   # extended below for the sanitizers
# SHARDWISE_SANITIZE=1: AddressSanitizer + UBSan (make asan); =thread: ThreadSanitizer (make tsan)
SANITIZE = {"": [], "thread": ["-fsanitize=thread"]}.get(os.environ.get("SHARDWISE_SANITIZE", ""),
                                                         ["-fsanitize=address,undefined"])
if SANITIZE:
    EXTRA += ["-O1", "-g", "-fno-omit-frame-pointer"] + SANITIZE
HEADERS = (glob("csrc/*.h") + glob("csrc/*.def") + [h for room in ROOMS for h in glob(f"csrc/{room}/*.h")]
           + glob("csrc/exec/gpu/*.h"))

core = Extension(
    "shardwise._core",
    sources=SOURCES,
    include_dirs=["csrc", numpy.get_include(), scipy_openblas32.get_include_dir()],
    library_dirs=[BLAS_LIB_DIR],
    libraries=[scipy_openblas32.get_library()],
    define_macros=core_sources.DEFINES,
    extra_compile_args=EXTRA,
    extra_link_args=["-pthread", "-Wl,-rpath,$ORIGIN/../scipy_openblas32/lib", f"-Wl,-rpath,{BLAS_LIB_DIR}"] + SANITIZE,
    depends=HEADERS,
)

print(f"shardwise: building the C core from {len(SOURCES)} sources", file=sys.stderr)
# strict=False: SHARDWISE_CUDA=1 is enforced when build_ext runs, not when pip only asks setup.py
# for build requirements or metadata (it asks before installing the nvidia wheels the build needs)
found = build_cuda.find(os.environ.get("SHARDWISE_CUDA", "auto"), strict=False)
modules = [core]
if found.ok:
    modules.append(build_cuda.extension(found, EXTRA, HEADERS, numpy.get_include()))
    print(f"shardwise: building the CUDA backend shardwise._cuda ({found.summary()})", file=sys.stderr)
elif found.required:
    print(f"shardwise: CUDA backend not found (yet): {found.reason}; SHARDWISE_CUDA=1 fails the build "
          "if it is still missing when the extensions are compiled", file=sys.stderr)
else:
    print(f"shardwise: CUDA backend not built: {found.reason}", file=sys.stderr)
# csrc/mpi/ is not one of the core's ROOMS: only shardwise._mpi compiles it (and includes mpi.h)
mpi = build_mpi.find(os.environ.get("SHARDWISE_MPI", "auto"), strict=False)
if mpi.ok:
    modules.append(build_mpi.extension(mpi, EXTRA, HEADERS))
    print(f"shardwise: building the MPI communicator shardwise._mpi ({mpi.summary()})", file=sys.stderr)
elif mpi.required:
    print(f"shardwise: MPI not found (yet): {mpi.reason}; SHARDWISE_MPI=1 fails the build if it is still "
          "missing when the extensions are compiled", file=sys.stderr)
else:
    print(f"shardwise: MPI communicator not built: {mpi.reason}", file=sys.stderr)
setup(ext_modules=modules,
      cmdclass={"build_ext": build_mpi.with_mpi(build_cuda.BuildExt.with_cuda(found), mpi)})
