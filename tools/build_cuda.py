"""Finding CUDA for the build (setup.py), and compiling the CUDA backend's .cu files.

What the CUDA backend (cuda/, the extension module shardwise._cuda) needs at build time:
  nvcc and the toolkit's CUDA runtime (its static library, so no libcudart is needed at run
  time), cuDNN (cudnn.h, libcudnn.so.9) and cuBLAS (cublas_v2.h, libcublas.so.13); NCCL
  (nccl.h and libnccl.so.2, nvidia-nccl-cu13) where found: then the module links libnccl.so.2 by
  its full path (the wheel ships no unversioned libnccl.so) and compiles the NCCL communicator
  (cuda/comm_nccl.c, SW_HAVE_NCCL=1); without it the module builds with SW_HAVE_NCCL=0 and says so.
Where they are looked for, first found wins:
  CUDA_HOME (or CUDA_PATH), then nvcc on PATH (its toolkit), then /usr/local/cuda;
  the nvidia wheels (nvidia-cudnn-cu13, nvidia-cublas, nvidia-nccl-cu13:
  site-packages/nvidia/{cudnn,cu13,nccl}) under the folders of SHARDWISE_CUDA_WHEELS (a
  `pip install --target` folder, as tests/gpu/test_cuda_build.py and tools/gpu_check.sh use), of
  this interpreter, also those of the environment being installed into when pip builds in
  an isolated environment; then CUDA_HOME and the system's include and library folders.
SHARDWISE_CUDA=1 is enforced when build_ext runs (BuildExt.run), not when setup.py is only
asked for metadata or build requirements: pip asks for those before it has installed the
nvidia wheels that the build requires (tools/build_backend.py).
The module's rpath names both the wheels' place relative to the installed module
($ORIGIN/../nvidia/...) and the folders found at build time, so no LD_LIBRARY_PATH is needed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from glob import glob

from setuptools import Extension

import build_optional  # noqa: E402  (tools/build_optional.py: what SHARDWISE_CUDA/SHARDWISE_MPI=auto|0|1 mean)
from setuptools.command.build_ext import build_ext

# the .cu files' GPU targets: Ampere and Hopper machine code, and Hopper PTX that newer GPUs
# compile at load time; SHARDWISE_CUDA_ARCH="90" (a list: "80;90") builds fewer, faster
DEFAULT_ARCHS = ("80", "90")


@dataclass
class Found:
    ok: bool
    reason: str = ""
    nvcc: str = ""
    toolkit: str = ""
    include_dirs: list[str] = field(default_factory=list)
    libraries: dict[str, str] = field(default_factory=dict)   # name -> the shared library's path
    versions: dict[str, str] = field(default_factory=dict)
    required: bool = False       # SHARDWISE_CUDA=1: build_ext fails with `reason` when not ok
    nccl_code: int = 0           # NCCL_VERSION_CODE of the nccl.h found (0: none found)
    nccl_include: str = ""       # the folder of that nccl.h, where libnccl.so.2 is beside it
    nccl_lib: str = ""           # libnccl.so.2's path ("": no NCCL communicator in the build)

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.versions.items())


def _site_roots() -> list[str]:
    """site-packages folders that may hold the nvidia wheels: this interpreter's path, and
    (under pip's build isolation) those of the environment the package is installed into."""
    roots = [os.path.abspath(p) for p in os.environ.get("SHARDWISE_CUDA_WHEELS", "").split(os.pathsep) if p]
    roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for base in (sys.prefix, sys.base_prefix):
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        roots += [paths["purelib"], paths["platlib"]]
    user = sysconfig.get_paths(scheme=f"{os.name}_user")["purelib"] if os.name == "posix" else None
    roots += [user] if user else []
    seen: list[str] = []
    for r in roots:
        if r and os.path.isdir(r) and r not in seen:
            seen.append(r)
    return seen


def _toolkit(nvcc: str) -> str | None:
    """The toolkit folder of nvcc (nvcc may be a wrapper script on PATH)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "include", "cuda_runtime_api.h")) and _cudart_static(c):
            return c
    return None


def _cudart_static(toolkit: str) -> str | None:
    for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
        p = os.path.join(toolkit, sub, "libcudart_static.a")
        if os.path.isfile(p):
            return p
    return None


def _find_lib(header: str, libs: tuple[str, ...], wheel_dirs: tuple[str, ...], toolkit: str | None):
    """(include folder, library path) of a library: the wheels first, then the toolkit and
    the system's folders."""
    places = [(os.path.join(r, "nvidia", w, "include"), os.path.join(r, "nvidia", w, "lib"))
              for r in _site_roots() for w in wheel_dirs]
    if toolkit:
        places += [(os.path.join(toolkit, "include"), os.path.join(toolkit, sub)) for sub in ("lib64", "lib")]
    places += [("/usr/include", "/usr/lib/x86_64-linux-gnu"), ("/usr/local/include", "/usr/local/lib")]
    for inc, lib in places:
        if not os.path.isfile(os.path.join(inc, header)):
            continue
        for name in libs:
            path = os.path.join(lib, name)
            if os.path.isfile(path):
                return inc, path
    return None


def _define(path: str, name: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(rf"#define\s+{name}\s+(\d+)", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def _find_nccl() -> tuple[str, int, str, str] | None:
    """(version, NCCL_VERSION_CODE, include folder, libnccl.so.2's path or "") of the first nccl.h
    of the wheels or the system, or None.  The library is looked for beside the header: the
    wheel's nvidia/nccl/lib, the system's library folders for /usr/include."""
    places = [(os.path.join(r, "nvidia", "nccl", "include"), [os.path.join(r, "nvidia", "nccl", "lib")])
              for r in _site_roots()]
    places += [("/usr/include", ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]),
               ("/usr/local/include", ["/usr/local/lib"])]
    for inc, libdirs in places:
        h = os.path.join(inc, "nccl.h")
        if os.path.isfile(h):
            v = [_define(h, k) for k in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")]
            code = _define(h, "NCCL_VERSION_CODE")
            lib = next((os.path.join(d, "libnccl.so.2") for d in libdirs
                        if os.path.isfile(os.path.join(d, "libnccl.so.2"))), "")
            return ".".join(x or "?" for x in v), int(code) if code else 0, inc, lib


def _versions(nvcc: str, cudnn_inc: str, cublas_inc: str) -> dict[str, str]:
    out = {}
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"release (\d+\.\d+)", text)
        out["CUDA"] = m.group(1) if m else "?"
    except (OSError, subprocess.SubprocessError):
        out["CUDA"] = "?"
    v = [_define(os.path.join(cudnn_inc, "cudnn_version.h"), k) for k in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")]
    out["cuDNN"] = ".".join(x or "?" for x in v)
    v = [_define(os.path.join(cublas_inc, "cublas_api.h"), k) for k in ("CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR",
                                                                          "CUBLAS_VER_PATCH")]
    out["cuBLAS"] = ".".join(x or "?" for x in v)
    return out


def find(mode: str, strict: bool = True) -> Found:
    """What SHARDWISE_CUDA=`mode` builds: Found(ok=True, ...) or the reason it skips.  Mode 1
    with something missing stops with that reason (SystemExit), at once when `strict`, else
    when build_ext runs (setup.py: pip runs setup.py for build requirements and metadata before
    it installs the wheels the build needs)."""
    return build_optional.find("SHARDWISE_CUDA", mode, strict, _search, lambda why: Found(False, why), missing_message)


def missing_message(found: Found) -> str:
    return f"shardwise: SHARDWISE_CUDA=1 but the CUDA backend cannot be built: {found.reason}"


def _search() -> Found:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = os.path.join(home, "bin", "nvcc") if home and os.path.isfile(os.path.join(home, "bin", "nvcc")) else None
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        return Found(False, "nvcc not found (neither $CUDA_HOME/bin/nvcc nor nvcc on PATH)")
    toolkit = _toolkit(nvcc)
    if not toolkit:
        return Found(False, f"nvcc found ({nvcc}) but not its toolkit's cuda_runtime_api.h and libcudart_static.a; "
                     "set CUDA_HOME")
    hint = "install the nvidia wheels (pip install 'shardwise[cuda]', or SHARDWISE_CUDA=1 pip install '.[cuda]') " \
           "or set CUDA_HOME to a toolkit that has it"
    cudnn = _find_lib("cudnn.h", ("libcudnn.so.9", "libcudnn.so"), ("cudnn",), toolkit)
    if not cudnn:
        return Found(False, f"nvcc found ({nvcc}) but not cuDNN 9 (cudnn.h, libcudnn.so.9): {hint}")
    cublas = _find_lib("cublas_v2.h", ("libcublas.so.13", "libcublas.so.12", "libcublas.so"), ("cu13", "cublas"),
                       toolkit)
    if not cublas:
        return Found(False, f"nvcc found ({nvcc}) but not cuBLAS (cublas_v2.h, libcublas.so.13): {hint}")
    includes = [os.path.join(toolkit, "include")]
    for inc in (cudnn[0], cublas[0]):
        if inc not in includes:
            includes.append(inc)
    versions = _versions(nvcc, cudnn[0], cublas[0])
    nccl = _find_nccl()
    versions["NCCL"] = (nccl[0] if nccl[3] else f"{nccl[0]} headers without libnccl.so.2 (no NCCL communicator)") \
        if nccl else "not found (no NCCL communicator)"
    return Found(True, nvcc=nvcc, toolkit=toolkit, include_dirs=includes,
                 libraries={"cudnn": cudnn[1], "cublas": cublas[1], "cudart_static": _cudart_static(toolkit)},
                 versions=versions, nccl_code=nccl[1] if nccl else 0,
                 nccl_include=nccl[2] if nccl and nccl[3] else "", nccl_lib=nccl[3] if nccl else "")


def _rpaths(found: Found) -> list[str]:
    """$ORIGIN-relative places of the wheels beside the installed package, then the folders
    the libraries were found in at build time (in-place builds, CUDA_HOME installs)."""
    out = ["$ORIGIN/../nvidia/cudnn/lib", "$ORIGIN/../nvidia/cu13/lib", "$ORIGIN/../nvidia/cublas/lib"]
    if found.nccl_lib:
        out.append("$ORIGIN/../nvidia/nccl/lib")
    for path in (found.libraries["cudnn"], found.libraries["cublas"], found.nccl_lib):
        d = os.path.dirname(path) if path else ""
        if d and d not in out:
            out.append(d)
    return out


def extension(found: Found, c_flags: list[str], depends: list[str], numpy_include: str) -> Extension:
    """shardwise._cuda: cuda/*.c (gcc, C11), cuda/kernels/*.cu (nvcc), and the pure host code
    it shares with the core (csrc/exec/gpu/*.c, csrc/core/view.c, csrc/core/ops.c: the op names,
    csrc/exec/task_env.c and the task kinds' names, csrc/graph/task_kinds.c), linked with cuDNN, cuBLAS and the static CUDA runtime, and with
    libnccl.so.2 (by its path) where found: SW_HAVE_NCCL=1 compiles the NCCL communicator
    (cuda/comm_nccl.c), 0 leaves it out.  Only PyInit__cuda is exported (-fvisibility=hidden): the
    core's symbols of the same names (sw_set_error, ...) are never confused with this module's."""
    nccl = bool(found.nccl_lib)
    ext = Extension(
        "shardwise._cuda",
        sources=sorted(glob("cuda/*.c")) + sorted(glob("csrc/exec/gpu/*.c"))
        + ["csrc/core/view.c", "csrc/core/ops.c", "csrc/exec/task_env.c", "csrc/graph/task_kinds.c"],
        include_dirs=["csrc", "cuda", numpy_include] + found.include_dirs
        + ([found.nccl_include] if nccl and found.nccl_include not in found.include_dirs else []),
        # SW_NCCL_BUILD_VERSION: NCCL_VERSION_CODE of the nccl.h found (0: none), for versions();
        # SW_HAVE_NCCL: the NCCL communicator is compiled and libnccl.so.2 linked
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                       ("SW_NCCL_BUILD_VERSION", str(found.nccl_code)), ("SW_HAVE_NCCL", "1" if nccl else "0")],
        extra_compile_args=c_flags + ["-fvisibility=hidden"],
        extra_link_args=[found.libraries["cudnn"], found.libraries["cublas"]]
        + ([found.nccl_lib] if nccl else []) + [found.libraries["cudart_static"],
                                                "-lrt", "-ldl", "-lpthread", "-Wl,--exclude-libs,ALL"]
        + [f"-Wl,-rpath,{p}" for p in _rpaths(found)],
        # the .cu files too: setuptools relinks (and BuildExt recompiles) only where something is newer
        depends=depends + glob("cuda/*.h") + glob("cuda/kernels/*.h") + glob("cuda/kernels/*.cuh")
        + sorted(glob("cuda/kernels/*.cu")),
    )
    ext.cu_sources = sorted(glob("cuda/kernels/*.cu"))
    ext.nvcc = found.nvcc
    ext.nvcc_includes = found.include_dirs
    return ext


def _arch_flags() -> list[str]:
    archs = [a.strip() for a in re.split(r"[;, ]+", os.environ.get("SHARDWISE_CUDA_ARCH", "")) if a.strip()]
    archs = archs or list(DEFAULT_ARCHS)
    for a in archs:
        if not a.isdigit():
            raise SystemExit(f"shardwise: SHARDWISE_CUDA_ARCH takes compute capabilities like 80;90, not {a!r}")
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return flags + [f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"]


class BuildExt(build_ext):
    """build_ext that compiles an extension's .cu files with nvcc first (in parallel, skipping
    objects newer than their source and headers) and links their objects in; the extensions
    themselves build in parallel (the core and shardwise._cuda at once) unless -j says
    otherwise.  `cuda` (setup.py sets it through `with_cuda`): what build_cuda.find found;
    SHARDWISE_CUDA=1 with the backend missing fails here, when something is built."""

    cuda: Found | None = None

    @classmethod
    def with_cuda(cls, found: Found) -> type:
        return type(cls.__name__, (cls,), {"cuda": found})

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel and len(self.extensions or []) > 1:
            self.parallel = min(len(self.extensions), os.cpu_count() or 1)

    def run(self) -> None:
        if self.cuda is not None and self.cuda.required and not self.cuda.ok:
            raise SystemExit(missing_message(self.cuda))
        super().run()

    def build_extension(self, ext: Extension) -> None:
        cu = getattr(ext, "cu_sources", None)
        if cu:
            headers = glob("cuda/kernels/*.h") + glob("cuda/kernels/*.cuh")
            newest_header = max((os.path.getmtime(h) for h in headers), default=0.0)
            objects, commands = [], []
            for src in cu:
                obj = os.path.join(self.build_temp, src + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                if (self.force or not os.path.exists(obj)
                        or os.path.getmtime(obj) < max(os.path.getmtime(src), newest_header)):
                    commands.append([ext.nvcc, "-c", src, "-o", obj, "-std=c++17", "-O3", "-Icuda/kernels",
                                     "-Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wextra"]
                                    + [f"-I{d}" for d in ext.nvcc_includes] + _arch_flags())
                objects.append(obj)
            for cmd in commands:
                print(" ".join(cmd), file=sys.stderr)
            jobs = max(1, min(len(commands), os.cpu_count() or 1))
            with ThreadPoolExecutor(jobs) as pool:
                results = list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), commands))
            for cmd, r in zip(commands, results):
                sys.stderr.write(r.stdout + r.stderr)
            for cmd, r in zip(commands, results):
                if r.returncode:
                    raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)
