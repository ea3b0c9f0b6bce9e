#!/usr/bin/env bash
# tools/gpu_check.sh: issue 26's one prepared device check (docs/gpu.md, "The device check").
#
#   bash tools/gpu_check.sh --prepare     # on a machine with network, before spending device time:
#                                         # the Python 3.12 x86-64 wheels the device machine lacks -> build/gpu_wheels
#   bash tools/gpu_check.sh               # on the GPU machine (no network): every step below, logs under $OUT
#   bash tools/gpu_check.sh --build-only  # only the build, installed into $GPU_CHECK_WORK/site (--target): what
#                                         # CI runs (tests/gpu/test_cuda_build.py); the environment is not changed
#
# The steps, each under `timeout`, each writing its log to $OUT (default ./gpu_out), and each run even
# when an earlier one failed, so that one run tells everything:
#   wheels      pip install --no-index --find-links build/gpu_wheels (what --prepare fetched; only the
#               missing ones are installed: pip keeps a package already there)
#   build       SHARDWISE_CUDA=1 SHARDWISE_CUDA_ARCH=90 pip install --no-build-isolation --no-deps --no-index .
#               (against the nvidia wheels installed beside python3; sm_90 only)
#   info        python -m shardwise info, nvidia-smi, nvcc, the versions of the Python packages used
#   tests       pytest -m gpu over tests/ (the marker, not file paths), every result listed (-rA):
#               the CUDA backend's tests and NCCL's (tests/gpu/test_nccl.py: one rank alone, one rank
#               bootstrapped over MPI under mpiexec -n 1, two ranks under mpiexec -n 2)
#   throughput  benchmarks/gpu_throughput.py (the scaled ResNet-18 and VGG at batch 8 and 64, ResNet-50
#               and VGG-16 at 64; TF32 off and on; PyTorch eager beside)
#   schedule    benchmarks/schedule.py --backend cuda --quick (the GPU row: fifo vs critical_path)
#   simulate    benchmarks/gpu_simulate.py (a profile timed by CUDA events against measured steps)
# then summary.txt: each step's exit status and seconds.  $OUT holds 8 files (the device tool
# brings back 8 at most).  The whole run stops starting steps at GPU_CHECK_BUDGET seconds (default
# 500) and cuts each step's limit to what is left, so it ends inside 9 minutes.
#
# Environment: OUT (logs; default ./gpu_out), PYTHON (default python3), GPU_CHECK_STEPS (a comma list
# of the steps to run, default all: e.g. GPU_CHECK_STEPS=build,tests for a rerun), GPU_CHECK_BUDGET,
# GPU_CHECK_WORK (scratch; default build/gpu_check), SHARDWISE_CUDA_ARCH (default 90),
# SHARDWISE_CUDA_WHEELS (a `pip install --target` folder of nvidia wheels, where they are not installed
# beside python3: CI's build check).
set -u
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_out}
# relative paths given by the caller are the caller's; the script runs from the repository root
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
cd "$(dirname "$0")/.." || exit 1
WHEELS=build/gpu_wheels
WORK=${GPU_CHECK_WORK:-build/gpu_check}
BUDGET=${GPU_CHECK_BUDGET:-500}
STEPS=${GPU_CHECK_STEPS:-wheels,build,info,tests,throughput,schedule,simulate}
# what the device machine lacks (docs/gpu.md): scipy-openblas32 (our GEMM) and mpich (the [mpi] extra:
# its mpicc lets the build step compile shardwise._mpi, over which the NCCL tests bootstrap; its
# mpiexec runs them); the others are there, but a bare environment (the rehearsal's) needs them
# too, and pip keeps a version already installed.  The nvidia wheels (cuDNN, cuBLAS, NCCL) are
# installed on the machine already, so they are not staged.
GPU_WHEEL_NAMES="scipy-openblas32>=0.3.27 mpich>=4.3 setuptools>=64 wheel hypothesis>=6"
export SHARDWISE_CUDA_ARCH=${SHARDWISE_CUDA_ARCH:-90}
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

mode=run
case "${1:-}" in
    --prepare) mode=prepare ;;
    --build-only) mode=build-only ;;
    "") ;;
    *) echo "usage: bash tools/gpu_check.sh [--prepare | --build-only]" >&2; exit 2 ;;
esac

if [ "$mode" = prepare ]; then
    # Python 3.12 manylinux x86-64 wheels, with their dependencies, whatever this machine runs
    rm -rf "$WHEELS" && mkdir -p "$WHEELS" || exit 1
    $PY -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" $GPU_WHEEL_NAMES || exit 1
    echo "$GPU_WHEEL_NAMES" | tr ' ' '\n' > "$WHEELS/requirements.txt"
    ls -l "$WHEELS"
    echo "gpu_check: $(du -sh "$WHEELS" | cut -f1) in $WHEELS; now run the device tool with carry=[\"$WHEELS\"]" \
         "(docs/gpu.md)"
    exit 0
fi

# nvcc: on PATH, else a toolkit in its usual place
if [ -z "${CUDA_HOME:-}" ] && ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda /usr/local/cuda-13* /opt/cuda; do
        if [ -x "$d/bin/nvcc" ]; then export CUDA_HOME=$d PATH="$PATH:$d/bin"; break; fi
    done
fi

mkdir -p "$OUT" "$WORK" || exit 1
START=$SECONDS
failed=0
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

# run_step NAME LIMIT_S LOG OK_RCS CMD...: CMD under timeout, min(LIMIT_S, what is left of BUDGET);
# OK_RCS: exit statuses that are not failures ("2" of a benchmark: no GPU, nothing measured)
run_step() {
    local name=$1 limit=$2 log=$3 ok_rcs=$4
    shift 4
    case ",$STEPS," in *",$name,"*) ;; *) return 0 ;; esac
    local left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt 15 ]; then
        echo "$name: not run (budget of ${BUDGET}s spent)" | tee -a "$SUMMARY"
        failed=1
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*" | tee -a "$log"
    local t0=$SECONDS rc
    if declare -F "$1" >/dev/null; then   # a function of this script (exported below): in a bash under timeout
        timeout -k 10 "$limit" bash -c '"$@"' _ "$@" >> "$log" 2>&1
    else
        timeout -k 10 "$limit" "$@" >> "$log" 2>&1
    fi
    rc=$?
    local status=ok
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="TIMED OUT after ${limit}s"; failed=1
    elif [ "$rc" -ne 0 ]; then
        case " $ok_rcs " in *" $rc "*) status="no GPU (exit $rc)" ;; *) status="FAILED (exit $rc)"; failed=1 ;; esac
    fi
    echo "$name: $status, $((SECONDS - t0)) s (log: $(basename "$log"))" | tee -a "$SUMMARY"
}

build() {
    # the one build of the CUDA backend, here and in CI: pip's own path through tools/build_backend.py
    # and setup.py, without build isolation, against the nvidia wheels already installed, no index
    local target=""
    if [ "$mode" = build-only ]; then rm -rf "$WORK/site"; target="--target=$WORK/site"; fi
    SHARDWISE_CUDA=1 $PY -m pip install -v --no-build-isolation --no-deps --no-index $target .
}
export -f build
export PY WHEELS WORK mode

if [ "$mode" = build-only ]; then
    STEPS=build
    run_step build 600 "$OUT/build.log" "" build
    cat "$SUMMARY"
    exit "$failed"
fi

wheels() {
    if [ ! -f "$WHEELS/requirements.txt" ]; then
        echo "no $WHEELS/requirements.txt: run 'bash tools/gpu_check.sh --prepare' here first and carry $WHEELS"
        return 1
    fi
    $PY -m pip install --no-index --no-cache-dir --find-links "$WHEELS" -r "$WHEELS/requirements.txt"
}

info() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')  host: $(uname -srm)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "python: $($PY -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    echo "nvcc: $(command -v nvcc || echo 'not on PATH') $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || true)"
    (cd /tmp && $PY -m shardwise info) || echo "shardwise info: FAILED (exit $?)"
    $PY -m pip list 2>/dev/null | grep -i -E '^(numpy|torch|pytest|hypothesis|scipy-openblas32|nvidia-(cudnn|cublas|nccl)[-a-z0-9]*|mpich|shardwise) '
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
        nvidia-smi || true
    else
        echo "nvidia-smi: not found (no NVIDIA driver here)"
    fi
}

export -f wheels info
run_step wheels 90 "$OUT/install.log" "" wheels
run_step build 240 "$OUT/build.log" "" build
run_step info 60 "$OUT/info.txt" "" info
# tests: by marker over tests/ (they may move into folders); a module that fails to import elsewhere
# must not stop the GPU tests; -v names each test as it starts, so a hang shows where; where
# pytest-timeout is installed (the device machine has it), a test over 120 s ends the run with
# every thread's stack in the log
TIMEOUT_ARGS=""
$PY -c "import pytest_timeout" 2>/dev/null && TIMEOUT_ARGS="--timeout=120 --timeout_method=thread"
run_step tests 240 "$OUT/tests.log" "" $PY -m pytest -m gpu -v -rA -p no:cacheprovider \
    --continue-on-collection-errors --durations=10 $TIMEOUT_ARGS tests
run_step throughput 150 "$OUT/gpu_throughput.txt" "2" $PY benchmarks/gpu_throughput.py --steps 5 --rounds 3
run_step schedule 60 "$OUT/schedule_gpu.txt" "2" $PY benchmarks/schedule.py --backend cuda --quick
run_step simulate 120 "$OUT/gpu_simulate.txt" "2" $PY benchmarks/gpu_simulate.py
echo "total: $((SECONDS - START)) s; $([ "$failed" = 0 ] && echo 'every step passed' || echo 'some step FAILED')" \
    | tee -a "$SUMMARY"
exit "$failed"
