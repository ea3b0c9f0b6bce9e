"""The C core's sources (the extension shardwise._core), in the order they are compiled, and its
compiler flags: read by setup.py for the build and by tools/arm_test.sh for the aarch64 cross
build, so both compile the same files the same way.  Paths are relative to the repository root."""
from __future__ import annotations

import os
from glob import glob

# csrc/'s rooms, lowest first (tools/rooms.py checks that each uses only the rooms below it)
ROOMS = ["core", "cost", "search", "graph", "mem", "sim", "exec", "cpu", "py"]
# -fno-trapping-math -fno-math-errno (as PyTorch builds): no value changes (no reassociation, no
# contraction), but loops with float selects vectorize (csrc/cpu/vmath.h) and sqrtf is an instruction.
COMPILE_ARGS = ["-std=c11", "-O3", "-fno-trapping-math", "-fno-math-errno", "-pthread", "-Wall", "-Wextra",
                "-Wno-missing-field-initializers"]
# the NumPy C API without its deprecated parts
DEFINES = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]


def gpu_plan_sources(root: str = ".") -> list[str]:
    """csrc/exec/gpu/*.c: the GPU backends' host-side planning (device map, stream priorities,
    events, arena layout, convolution geometry), plain C without CUDA headers: built into the core
    (the record backend and tests use it) and into shardwise._cuda."""
    return sorted(os.path.relpath(p, root) for p in glob(os.path.join(root, "csrc/exec/gpu/*.c")))


def core_sources(root: str = ".") -> list[str]:
    """Every C file of shardwise._core: the rooms' files in room order, then the GPU planning."""
    rooms = [os.path.relpath(c, root) for room in ROOMS for c in sorted(glob(os.path.join(root, f"csrc/{room}/*.c")))]
    return rooms + gpu_plan_sources(root)


if __name__ == "__main__":   # tools/arm_test.sh: one source a line, or (--flags) the flags on one line
    import sys

    if sys.argv[1:] == ["--flags"]:
        print(" ".join(COMPILE_ARGS + [f"-D{name}={value}" for name, value in DEFINES]))
    else:
        print("\n".join(core_sources()))
