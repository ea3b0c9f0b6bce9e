"""Finding CUDA for the build (setup.py), and compiling the CUDA backend's .cu files.

What the CUDA backend (cuda/, the extension module shardwise._cuda) needs at build time:
  nvcc and the toolkit's CUDA runtime (its static library, so no libcudart is needed at run
  time), cuDNN (cudnn.h, libcudnn.so.9) and cuBLAS (cublas_v2.h, libcublas.so.13).
Where they are looked for, first found wins:
  CUDA_HOME (or CUDA_PATH), then nvcc on PATH (its toolkit), then /usr/local/cuda;
  the nvidia wheels (nvidia-cudnn-cu13, nvidia-cublas: site-packages/nvidia/{cudnn,cu13}) of
  this interpreter, also those of the environment being installed into when pip builds in
  an isolated environment; then CUDA_HOME and the system's include and library folders.
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
from dataclasses import dataclass, field
from glob import glob

from setuptools import Extension
from setuptools.command.build_ext import build_ext

MODES = ("auto", "0", "1")
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

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.versions.items())


def _site_roots() -> list[str]:
    """site-packages folders that may hold the nvidia wheels: this interpreter's path, and
    (under pip's build isolation) those of the environment the package is installed into."""
    roots = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
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


def find(mode: str) -> Found:
    """What SHARDWISE_CUDA=`mode` builds: Found(ok=True, ...) or the reason it skips.  Mode 1
    with something missing stops the build with that reason."""
    mode = (mode or "auto").strip().lower()
    if mode not in MODES:
        raise SystemExit(f"shardwise: SHARDWISE_CUDA must be auto, 0 or 1, not {mode!r}")
    if mode == "0":
        return Found(False, "SHARDWISE_CUDA=0")
    found = _search()
    if not found.ok and mode == "1":
        raise SystemExit(f"shardwise: SHARDWISE_CUDA=1 but the CUDA backend cannot be built: {found.reason}")
    return found


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
    return Found(True, nvcc=nvcc, toolkit=toolkit, include_dirs=includes,
                 libraries={"cudnn": cudnn[1], "cublas": cublas[1], "cudart_static": _cudart_static(toolkit)},
                 versions=_versions(nvcc, cudnn[0], cublas[0]))


def _rpaths(found: Found) -> list[str]:
    """$ORIGIN-relative places of the wheels beside the installed package, then the folders
    the libraries were found in at build time (in-place builds, CUDA_HOME installs)."""
    out = ["$ORIGIN/../nvidia/cudnn/lib", "$ORIGIN/../nvidia/cu13/lib", "$ORIGIN/../nvidia/cublas/lib"]
    for name in ("cudnn", "cublas"):
        d = os.path.dirname(found.libraries[name])
        if d not in out:
            out.append(d)
    return out


def extension(found: Found, c_flags: list[str], depends: list[str], numpy_include: str) -> Extension:
    """shardwise._cuda: cuda/*.c (gcc, C11), cuda/kernels/*.cu (nvcc), and the pure host code
    it shares with the core (csrc/exec/gpu/*.c, csrc/core/view.c, csrc/core/ops.c: the op names,
    csrc/exec/task_env.c), linked with cuDNN, cuBLAS and the static CUDA runtime.  Only PyInit__cuda is exported (-fvisibility=hidden): the core's
    symbols of the same names (sw_set_error, ...) are never confused with this module's."""
    ext = Extension(
        "shardwise._cuda",
        sources=sorted(glob("cuda/*.c")) + sorted(glob("csrc/exec/gpu/*.c"))
        + ["csrc/core/view.c", "csrc/core/ops.c", "csrc/exec/task_env.c"],
        include_dirs=["csrc", "cuda", numpy_include] + found.include_dirs,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=c_flags + ["-fvisibility=hidden"],
        extra_link_args=[found.libraries["cudnn"], found.libraries["cublas"], found.libraries["cudart_static"],
                         "-lrt", "-ldl", "-lpthread", "-Wl,--exclude-libs,ALL"]
        + [f"-Wl,-rpath,{p}" for p in _rpaths(found)],
        depends=depends + glob("cuda/*.h") + glob("cuda/kernels/*.h") + glob("cuda/kernels/*.cuh"),
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
    """build_ext that compiles an extension's .cu files with nvcc first (skipping objects newer
    than their source and headers) and links their objects in."""

    def build_extension(self, ext: Extension) -> None:
        cu = getattr(ext, "cu_sources", None)
        if cu:
            headers = glob("cuda/kernels/*.h") + glob("cuda/kernels/*.cuh")
            newest_header = max((os.path.getmtime(h) for h in headers), default=0.0)
            objects = []
            for src in cu:
                obj = os.path.join(self.build_temp, src + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                if (self.force or not os.path.exists(obj)
                        or os.path.getmtime(obj) < max(os.path.getmtime(src), newest_header)):
                    cmd = ([ext.nvcc, "-c", src, "-o", obj, "-std=c++17", "-O3", "-Icuda/kernels",
                            "-Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wextra"]
                           + [f"-I{d}" for d in ext.nvcc_includes] + _arch_flags())
                    print(" ".join(cmd), file=sys.stderr)
                    subprocess.run(cmd, check=True)
                objects.append(obj)
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)
