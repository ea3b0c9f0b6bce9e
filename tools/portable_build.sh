#!/usr/bin/env bash
# tools/portable_build.sh: compile every C file of the core for another architecture (default
# aarch64, with Debian's gcc-aarch64-linux-gnu), warnings as errors, so that code written for
# x86-64 (intrinsics, target attributes) stays behind its guards and the portable paths build.
# Links nothing and runs nothing: running the tests there needs that machine (or an emulator).
#
#   apt-get install gcc-aarch64-linux-gnu && bash tools/portable_build.sh [CC]
set -u
CC=${1:-aarch64-linux-gnu-gcc}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 1
command -v "$CC" >/dev/null || { echo "portable_build: no $CC (apt-get install gcc-aarch64-linux-gnu)"; exit 2; }
inc=$($PY - <<'PY'
import os, sysconfig
dirs = [sysconfig.get_paths()["include"]]
import numpy
dirs.append(numpy.get_include())
try:
    import scipy_openblas32
    dirs.append(scipy_openblas32.get_include_dir())
except ImportError:
    pass
# mpi.h: the mpich wheel installs it beside Python's own headers (sys.prefix/include)
import sys
dirs.append(os.path.join(sys.prefix, "include"))
print(" ".join("-I" + d for d in dirs))
PY
)
failed=0
n=0
for f in $(find csrc -name '*.c' | sort); do
    case "$f" in csrc/mpi/*) [ -n "$(find ${inc//-I/} -maxdepth 1 -name mpi.h 2>/dev/null)" ] || continue ;; esac
    n=$((n + 1))
    if ! "$CC" -std=c11 -O2 -Wall -Wextra -Wno-missing-field-initializers -Werror -pthread -fPIC \
            -DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION $inc -Icsrc -c "$f" -o /dev/null; then
        echo "portable_build: $f does not compile with $CC"
        failed=$((failed + 1))
    fi
done
echo "portable_build: $n C files compiled with $CC ($("$CC" -dumpmachine)), $failed failed"
[ "$failed" -eq 0 ]
