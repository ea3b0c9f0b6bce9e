#!/usr/bin/env bash
# tools/arm_test.sh: build the C core for aarch64 and run tests on it under emulation
# (qemu-user), so that the portable paths (no AVX2, no AVX-512: the C loops and OpenBLAS's
# ARM kernels) are run and checked, not only compiled.
#
#   bash tools/arm_test.sh --setup          # once: Debian's arm64 Python 3.11 and the aarch64
#                                           # wheels of numpy, scipy-openblas32, pytest, hypothesis
#   bash tools/arm_test.sh [pytest args]    # build into build/arm64/ and run the tests there
#
# Without pytest arguments it runs ARM_TESTS (below).  What it needs on the host (Debian or
# Ubuntu, x86-64): gcc-aarch64-linux-gnu and qemu-user-static (apt), and network access for
# --setup (Debian's archive and PyPI).  Nothing is installed into the host's Python.
#
# Emulation runs Python about 10-30x slower than the host, and a test that starts another
# Python (sys.executable: the CLI, mpiexec, subprocess checks) cannot run: without binfmt_misc
# the kernel cannot start an aarch64 program.  Those tests are left to a real ARM machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ARM_ROOT:-/opt/arm64}         # sysroot (root/), wheels (wheels/), unpacked wheels (site/)
CC=${CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU:-qemu-aarch64-static}
# the emulated CPU: a Neoverse N1 (AWS Graviton2, Ampere Altra).  Not qemu's default "max": OpenBLAS
# then takes its SME kernels, which qemu 7.2 does not emulate correctly (linear layers gave NaN).
export QEMU_CPU=${QEMU_CPU:-neoverse-n1}
OUT=build/arm64
# the op kernels on every conformance case, the optimizers, the runtime's training steps
# (plans on 1 to 4 CPU workers against one worker and the NumPy reference), convolution paths
ARM_TESTS=(tests/ops tests/train/test_train.py tests/train/test_optim.py tests/train/test_runtime.py)

setup() {
    command -v "$CC" >/dev/null && command -v "$QEMU" >/dev/null \
        || apt-get install -y gcc-aarch64-linux-gnu qemu-user-static
    dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64 && apt-get update -q; }
    mkdir -p "$ROOT/debs" "$ROOT/root" "$ROOT/wheels" "$ROOT/site"
    # Debian's Python 3.11 for arm64 and everything it needs, unpacked (not installed) into root/
    local pkgs
    pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances --no-pre-depends python3.11:arm64 libpython3.11-dev:arm64 libstdc++6:arm64 \
           | grep -v '^ ' | grep -v '<' | grep ':arm64$' | grep -v -e '^dpkg' -e '^install-info' -e '^tar:' | sort -u)
    (cd "$ROOT/debs" && apt-get download $pkgs)
    for deb in "$ROOT"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT/root"; done
    # the same numpy and OpenBLAS versions as the host's, for aarch64
    local np ob
    np=$(python3 -c 'import numpy; print(numpy.__version__)')
    ob=$(python3 -c 'import scipy_openblas32; print(scipy_openblas32.__version__)')
    pip download -q --only-binary=:all: --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
        --python-version 3.11 --implementation cp --abi cp311 -d "$ROOT/wheels" \
        "numpy==$np" "scipy-openblas32==$ob" pytest hypothesis tqdm
    for whl in "$ROOT"/wheels/*.whl; do python3 -m zipfile -e "$whl" "$ROOT/site/"; done
    echo "arm_test: sysroot and wheels ready under $ROOT"
}

if [ "${1:-}" = "--setup" ]; then
    setup
    exit 0
fi
for need in "$CC" "$QEMU"; do
    command -v "$need" >/dev/null || { echo "arm_test: no $need (bash tools/arm_test.sh --setup)"; exit 2; }
done
[ -x "$ROOT/root/usr/bin/python3.11" ] && [ -d "$ROOT/site/numpy" ] \
    || { echo "arm_test: no aarch64 Python under $ROOT (bash tools/arm_test.sh --setup)"; exit 2; }

# --- build: the sources and flags of setup.py's shardwise._core, cross-compiled ---------------
mapfile -t SOURCES < <(python3 tools/core_sources.py)   # setup.py's list
mkdir -p "$OUT/obj" "$OUT/pkg"
rm -rf "$OUT/pkg/shardwise"
cp -r python/shardwise "$OUT/pkg/"
find "$OUT/pkg/shardwise" \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
# the sysroot's own C library headers stay behind the cross compiler's (-idirafter): only its
# Python headers (and pyconfig.h's aarch64-linux-gnu/ directory) are wanted from there
INC=(-Icsrc -isystem "$ROOT/root/usr/include/python3.11" -idirafter "$ROOT/root/usr/include"
     -isystem "$ROOT/site/numpy/_core/include" -isystem "$ROOT/site/scipy_openblas32/include")
read -r -a FLAGS < <(python3 tools/core_sources.py --flags)   # setup.py's
FLAGS+=(-Werror -fPIC)
objs=()
for src in "${SOURCES[@]}"; do
    obj="$OUT/obj/$(echo "$src" | tr / _).o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find csrc -name '*.h' -newer "$obj" -print -quit)" ]; then
        "$CC" "${FLAGS[@]}" "${INC[@]}" -c "$src" -o "$obj" &
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
    fi
    objs+=("$obj")
done
wait
so="$OUT/pkg/shardwise/_core.cpython-311-aarch64-linux-gnu.so"
"$CC" -shared -pthread "${objs[@]}" -L"$ROOT/site/scipy_openblas32/lib" -lscipy_openblas -lm -o "$so"
echo "arm_test: built $so ($("$CC" -dumpmachine), ${#SOURCES[@]} sources)"

# --- run: the aarch64 Python under qemu, the package and wheels on its path --------------------
[ $# -gt 0 ] || set -- "${ARM_TESTS[@]}"
export PYTHONPATH="$PWD/$OUT/pkg:$ROOT/site"
export PYTHONDONTWRITEBYTECODE=1
exec "$QEMU" -L "$ROOT/root" "$ROOT/root/usr/bin/python3.11" -c \
    'import platform, sys, pytest, shardwise; from shardwise import _core
print(f"arm_test: Python {platform.python_version()} on {platform.machine()}, shardwise from {shardwise.__file__}, direct convolution: {_core.conv_isa()}", flush=True)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))' "$@"
