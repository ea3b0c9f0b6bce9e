"""Build of the C extension shardwise._core (CPython C API + NumPy C API + OpenBLAS).

GEMM comes from OpenBLAS as NumPy and SciPy ship it: the scipy-openblas32
wheel (a build and runtime dependency), whose symbols carry a ``scipy_``
prefix.  The extension finds the library through an rpath next to itself in
site-packages (and the build-time location for in-place builds).

CUDA sources (a later issue) are compiled only when nvcc is found; set
SHARDWISE_CUDA=0 to skip them or SHARDWISE_CUDA=1 to require them.
"""
import os
import sys
from glob import glob

import numpy
import scipy_openblas32
from setuptools import Extension, setup

SOURCES = (sorted(glob("csrc/*.c")) + sorted(glob("csrc/exec/*.c")) + sorted(glob("csrc/cpu/*.c"))
           + sorted(glob("csrc/py/*.c")))
BLAS_LIB_DIR = scipy_openblas32.get_lib_dir()
EXTRA = ["-std=c11", "-O3", "-pthread", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
# SHARDWISE_SANITIZE=1: AddressSanitizer + UBSan (make asan); =thread: ThreadSanitizer (make tsan)
SANITIZE = {"": [], "thread": ["-fsanitize=thread"]}.get(os.environ.get("SHARDWISE_SANITIZE", ""),
                                                         ["-fsanitize=address,undefined"])
if SANITIZE:
    EXTRA += ["-O1", "-g", "-fno-omit-frame-pointer"] + SANITIZE

core = Extension(
    "shardwise._core",
    sources=SOURCES,
    include_dirs=["csrc", numpy.get_include(), scipy_openblas32.get_include_dir()],
    library_dirs=[BLAS_LIB_DIR],
    libraries=[scipy_openblas32.get_library()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=EXTRA,
    extra_link_args=["-pthread", "-Wl,-rpath,$ORIGIN/../scipy_openblas32/lib", f"-Wl,-rpath,{BLAS_LIB_DIR}"] + SANITIZE,
    depends=glob("csrc/*.h") + glob("csrc/*.def") + glob("csrc/exec/*.h") + glob("csrc/cpu/*.h") + glob("csrc/py/*.h"),
)

print(f"shardwise: building the C core from {len(SOURCES)} sources", file=sys.stderr)
setup(ext_modules=[core])
