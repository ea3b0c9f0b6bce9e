"""The CUDA backend from Python: whether it is built, why it cannot run here, the GPUs.

    sw.backends()                          # ["cpu", "cuda"] when this installation has the CUDA backend
    sw.cuda.status()                       # (True, "") or (False, "no NVIDIA driver: ...")
    d = sw.DeviceGraph.local_gpus(logical=4)   # this machine's GPUs as 4 logical devices
    t = sw.Trainer(g, plan, backend="cuda")

The backend is its own extension module, ``shardwise._cuda`` (cuda/ in the sources), built
only where the build found nvcc, cuDNN and cuBLAS (docs/gpu.md); importing shardwise never
loads it.  Its GPU tests pass on an H200 (docs/gpu.md records every run on a GPU).
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from shardwise.errors import ConfigError, DeviceGraphError

# FP32 lanes per multiprocessor by compute capability (NVIDIA's architecture whitepapers):
# Volta, Turing and the A100 have 64, later consumer and data-centre parts 128
_FP32_LANES = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
# a link between two GPUs when nothing better is known: PCIe 4.0 x16, one direction
NOMINAL_GPU_LINK = 25e9


class BackendUnavailableError(ConfigError):
    """A backend that cannot run here; the message names what is missing (the CUDA backend not
    built into this installation, its libraries, the NVIDIA driver, a GPU)."""


@dataclass(frozen=True)
class Gpu:
    """One GPU as the driver describes it."""

    index: int
    name: str
    capability: tuple[int, int]
    memory: int                  # bytes
    multiprocessors: int
    clock_mhz: int
    mem_bandwidth: float         # bytes/s

    @property
    def flops(self) -> float:
        """Peak FP32 FLOP/s: 2 (a fused multiply-add) x lanes x multiprocessors x clock."""
        lanes = _FP32_LANES.get(self.capability, 64 if self.capability < (7, 0) else 128)
        return 2.0 * lanes * self.multiprocessors * self.clock_mhz * 1e6


def built() -> bool:
    """Whether this installation has the CUDA backend (its module exists; nothing is loaded)."""
    return importlib.util.find_spec("shardwise._cuda") is not None


def load() -> ModuleType:
    """shardwise._cuda, or BackendUnavailableError saying why it cannot be loaded."""
    if not built():
        raise BackendUnavailableError(
            "the CUDA backend is not built into this installation of shardwise: its build found no nvcc, cuDNN or "
            "cuBLAS (reinstall with SHARDWISE_CUDA=1 pip install '.[cuda]'; docs/gpu.md)")
    try:
        from shardwise import _cuda
    except ImportError as exc:
        raise BackendUnavailableError(f"the CUDA backend is built but its libraries cannot be loaded: {exc} "
                                      "(pip install 'shardwise[cuda]' installs cuDNN and cuBLAS)") from None
    return _cuda


def gpus() -> list[Gpu]:
    """The GPUs the driver sees; BackendUnavailableError naming what is missing when none."""
    module = load()
    try:
        found = module.gpus()
    except RuntimeError as exc:
        raise BackendUnavailableError(f"the CUDA backend cannot run here: {exc}") from None
    if not found:
        raise BackendUnavailableError("the CUDA backend cannot run here: the NVIDIA driver sees no GPU")
    return [Gpu(k, name, tuple(cc), mem, sms, mhz, bw) for k, (name, cc, mem, sms, mhz, bw) in enumerate(found)]


def status() -> tuple[bool, str]:
    """(True, "") where the CUDA backend can train, else (False, the reason)."""
    try:
        gpus()
    except BackendUnavailableError as exc:
        return False, str(exc)
    return True, ""


def require() -> list[Gpu]:
    """The GPUs, or BackendUnavailableError: what Trainer(backend="cuda") checks first."""
    return gpus()


def op_kinds() -> frozenset[str]:
    """Op kinds the CUDA backend has kernels for (empty when it is not built)."""
    from shardwise import _core

    if not built():
        return frozenset()
    module = load()
    return frozenset(k for i, k in enumerate(_core.OP_KINDS) if module.has_kernels(i))


def gpu_map(logical: int, ngpus: int) -> list[int]:
    """The GPU of each of ``logical`` devices over ``ngpus`` GPUs: contiguous blocks
    (csrc/exec/gpu/device_map.c), so neighbouring devices share a GPU."""
    from shardwise import _core

    return list(_core.gpu_map(logical, ngpus))


def local_gpus(logical: int | None = None) -> Any:
    """This machine's GPUs as a DeviceGraph of ``logical`` devices (default: one per GPU).

    Each logical device gets its GPU's FLOP/s and memory divided by the devices sharing it;
    links: a GPU's memory bandwidth / 2 between devices on one GPU (a copy reads and writes),
    NOMINAL_GPU_LINK between GPUs (not measured).  The graph's ``gpu_of`` lists each logical
    device's GPU, which sw.Trainer(..., backend="cuda") follows."""
    from shardwise.machine.devices import DeviceGraph

    found = gpus()
    if logical is None:
        logical = len(found)
    if isinstance(logical, bool) or not isinstance(logical, int) or logical <= 0:
        raise DeviceGraphError(f"logical must be a positive int, got {logical!r}")
    gpu_of = gpu_map(logical, len(found))
    sharing = [gpu_of.count(k) for k in range(len(found))]
    g = DeviceGraph(f"{logical} logical on {len(found)} GPU(s)")
    for d, k in enumerate(gpu_of):
        gpu = found[k]
        g.add_device(f"gpu{k}.{d}", gpu.flops / sharing[k], gpu.memory / sharing[k],
                     gpu.mem_bandwidth / sharing[k] if gpu.mem_bandwidth > 0 else None, kind=gpu.name)
    for a in range(logical):
        for b in range(a + 1, logical):
            same = gpu_of[a] == gpu_of[b]
            bw = found[gpu_of[a]].mem_bandwidth / 2 if same and found[gpu_of[a]].mem_bandwidth > 0 else NOMINAL_GPU_LINK
            g.add_link(a, b, bw)
    g.gpu_of = gpu_of
    return g


def nccl_version() -> str | None:
    """NCCL's version where the nvidia-nccl wheel is installed (found on sys.path, loaded with
    ctypes; the CUDA backend itself links libnccl.so.2 where its build found it: info()'s
    "nccl_linked")."""
    for root in sys.path:
        for path in glob.glob(os.path.join(root, "nvidia", "nccl", "lib", "libnccl.so.*")):
            try:
                lib = ctypes.CDLL(path)
                v = ctypes.c_int()
                if lib.ncclGetVersion(ctypes.byref(v)) == 0:
                    n = v.value   # major * 10000 + minor * 100 + patch (NCCL >= 2.9)
                    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
            except OSError:
                continue
    return None


def info() -> dict[str, Any]:
    """What `python -m shardwise info` prints of CUDA: versions found and GPUs (or why none)."""
    out: dict[str, Any] = {"built": built(), "nccl": nccl_version()}
    if not out["built"]:
        out["reason"] = "not built into this installation (its build found no nvcc, cuDNN or cuBLAS)"
        return out
    try:
        module = load()
    except BackendUnavailableError as exc:
        out["reason"] = str(exc)
        return out
    v = module.versions()
    out["cuda_build"] = f"{v['cuda_build'] // 1000}.{v['cuda_build'] % 1000 // 10}"
    out["driver"] = f"{v['driver'] // 1000}.{v['driver'] % 1000 // 10}" if v["driver"] else None
    out["cudnn"] = _cudnn_version(v["cudnn"])
    out["cublas"] = ".".join(map(str, v["cublas"]))
    # the NCCL communicator (cuda/comm_nccl.c): ncclGetVersion of the libnccl.so.2 the module links,
    # None where its build found no NCCL
    linked = module.nccl_version() if getattr(module, "HAVE_NCCL", False) else None
    out["nccl_linked"] = f"{linked // 10000}.{linked // 100 % 100}.{linked % 100}" if linked else None
    # what it was built with, from the headers (NCCL: the nccl.h the build found)
    nccl = v.get("nccl_build", 0)
    out["build"] = {"cuDNN": _cudnn_version(v["cudnn_build"]),
                    "cuBLAS": ".".join(map(str, v["cublas_build"])) if "cublas_build" in v else "?",
                    "NCCL": f"{nccl // 10000}.{nccl // 100 % 100}.{nccl % 100}" if nccl else "no nccl.h found"}
    try:
        out["gpus"] = gpus()
    except BackendUnavailableError as exc:
        out["gpus"] = []
        out["reason"] = str(exc)
    return out


def _cudnn_version(n: int) -> str:
    """cuDNN 9 numbers versions major * 10000 + minor * 100 + patch."""
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
