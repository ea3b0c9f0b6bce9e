"""Build of the C extension shardwise._core (CPython C API + NumPy C API).

CUDA sources (a later issue) are compiled only when nvcc is found; set
SHARDWISE_CUDA=0 to skip them or SHARDWISE_CUDA=1 to require them.
"""
import os
import sys
from glob import glob

import numpy
from setuptools import Extension, setup

SOURCES = sorted(glob("csrc/*.c")) + sorted(glob("csrc/py/*.c"))
EXTRA = ["-std=c11", "-O3", "-pthread", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
if os.environ.get("SHARDWISE_SANITIZE"):
    EXTRA += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]

core = Extension(
    "shardwise._core",
    sources=SOURCES,
    include_dirs=["csrc", numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=EXTRA,
    extra_link_args=["-pthread"] + (["-fsanitize=address,undefined"] if os.environ.get("SHARDWISE_SANITIZE") else []),
    depends=glob("csrc/*.h"),
)

print(f"shardwise: building the C core from {len(SOURCES)} sources", file=sys.stderr)
setup(ext_modules=[core])
