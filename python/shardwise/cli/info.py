"""`python -m shardwise info`: the version, the backends built, and for CUDA the versions found
and the GPUs seen, or why none (docs/gpu.md); the MPI library shardwise._mpi loads, or why none
(docs/distributed.md)."""
from __future__ import annotations

import platform

from shardwise import __version__, distributed
from shardwise.machine import cuda
from shardwise.train.runtime import backends


def info_text() -> str:
    lines = [f"shardwise {__version__} (Python {platform.python_version()})",
             f"backends built: {', '.join(backends())}"]
    c = cuda.info()
    if not c["built"]:
        lines.append(f"cuda: {c['reason']}")
    elif "cuda_build" not in c:
        lines.append(f"cuda: built, but it cannot be loaded: {c['reason']}")
    else:
        b = c["build"]
        lines.append(f"cuda: built with CUDA {c['cuda_build']}, cuDNN {b['cuDNN']}, cuBLAS {b['cuBLAS']}, "
                     f"NCCL {b['NCCL']} (headers); cuDNN {c['cudnn']}, cuBLAS {c['cublas']} loaded")
        lines.append(f"  driver: {c['driver'] or 'none (libcuda.so.1 not found)'}")
    if c.get("nccl_linked"):
        lines.append(f"  NCCL: {c['nccl_linked']} linked (ncclGetVersion): the NCCL communicator is built "
                     "(sw.distributed.nccl_comm)")
    else:
        absent = "absent from this build (no nccl.h and libnccl.so.2 found)" if "cuda_build" in c else "absent"
        lines.append(f"  NCCL: {absent}; {c['nccl'] + ' loadable' if c['nccl'] else 'no libnccl found'}")
    if c.get("gpus"):
        for g in c["gpus"]:
            lines.append(f"  GPU {g.index}: {g.name}, compute {g.capability[0]}.{g.capability[1]}, "
                         f"{g.memory / 2**30:.1f} GiB, {g.multiprocessors} SMs, {g.flops / 1e12:.1f} TFLOP/s FP32")
    elif c["built"] and "cuda_build" in c:
        lines.append(f"  GPUs: none ({c.get('reason', 'none seen')})")
    lines += mpi_lines(distributed.info())
    return "\n".join(lines) + "\n"


def mpi_lines(m: dict) -> list[str]:
    """The MPI library (MPI_Get_library_version; MPI is not started) or why there is none."""
    if "library" not in m:
        return [f"mpi: {m['reason']}"]
    v = m["version"]
    out = [f"mpi: {m['library']} (MPI {v[0]}.{v[1]}), built against {m['build']}"]
    out.append(f"  library: {m['library_path'] or '?'}; launcher: {m['mpiexec'] or 'no mpiexec found'}")
    return out
