"""Build the emulator's stub libraries with the system C compiler against the installed nvidia headers.

One stub per CUDA library that the installed torch links, named by the SONAME torch asks for
(libcudart.so.12 or libcudart.so.13, libcufft.so.11 or .so.12, ...) and carrying the symbol versions
torch's references ask for (a version script per library), compiled against the headers of that CUDA
release (cuda_release.py reads both from torch's libraries and the nvidia wheels). Every symbol torch
references (and, where it is installed, Transformer Engine and the nvidia libraries it loads: `framework_libs`)
and Maya does not implement is generated as a stub that fails loudly, naming itself. The result is cached under
`$MAYA_HOME/emulator/<hash>/`, keyed by the sources, those libraries, the CUDA release's headers and the compiler.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from maya.core import settings

from . import cuda_release as release_module
from .capture_format import (
    CU_FILE_DRIVER_NOT_INITIALIZED,
    CUBLAS_STATUS_NOT_SUPPORTED,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDNN_STATUS_NOT_SUPPORTED,
    CUFFT_NOT_SUPPORTED,
    CUPTI_ERROR_NOT_SUPPORTED,
    CURAND_STATUS_ARCH_MISMATCH,
    CUSOLVER_STATUS_NOT_SUPPORTED,
    CUSPARSE_STATUS_NOT_SUPPORTED,
    D_CUBLAS,
    D_CUBLASLT,
    D_CUDNN,
    D_DRIVER,
    D_NCCL,
    D_NVML,
    D_OTHER,
    D_RUNTIME,
    NCCL_INVALID_USAGE,
    NVML_ERROR_NOT_SUPPORTED,
    NVRTC_ERROR_INTERNAL_ERROR,
    NVSHMEM_ERROR,
)
from .cuda_release import CudaRelease, ReleaseError, detect, installed_wheels

NATIVE = Path(__file__).parent / "native"


class BuildError(RuntimeError):
    """The emulator cannot be built here; the message says what is missing."""


@dataclass(frozen=True)
class StubLib:
    soname: str
    sources: tuple[str, ...]  # hand-written implementations (may be empty)
    version_tag: str | None  # symbol version torch's references carry
    domain: int  # D_* of capture_format (maya_emu.h), for unimplemented records
    error_code: int  # what an unimplemented call returns (the library's "not supported", capture_format)
    prefixes: tuple[str, ...] = ()  # unversioned symbols with these prefixes belong here
    header: str | None = None  # every function this header declares gets at least a loud stub
    cflags: tuple[str, ...] = ()


# SONAMEs and version tags as CUDA 13 names them: `stub_libs` renames each library to the SONAME (and tag)
# the installed torch links for its stem, and leaves out those it does not link (DRIVER_LIBS are always built).
LIBS = (
    StubLib(
        "libcudart.so.13",
        ("cudart.c", "cudart12.c"),
        "libcudart.so.13",
        D_RUNTIME,
        CUDA_ERROR_NOT_SUPPORTED,
        header="cuda_runtime_api.h",
    ),
    StubLib("libcuda.so.1", ("driver.c", "tensor_map.c"), None, D_DRIVER, CUDA_ERROR_NOT_SUPPORTED, ("cu",), "cuda.h"),
    StubLib(
        "libcublas.so.13",
        ("cublas.c",),
        "libcublas.so.13",
        D_CUBLAS,
        CUBLAS_STATUS_NOT_SUPPORTED,
        header="cublas_api.h",
    ),
    StubLib(
        "libcublasLt.so.13",
        ("cublaslt.c",),
        "libcublasLt.so.13",
        D_CUBLASLT,
        CUBLAS_STATUS_NOT_SUPPORTED,
        header="cublasLt.h",
    ),
    StubLib(
        "libcudnn.so.9",
        ("cudnn.c", "cudnn_legacy.c", "cudnn_rnn.c", "cudnn_batchnorm.c", "cudnn_ctc.c", "cudnn_spatial.c"),
        "libcudnn.so.9",
        D_CUDNN,
        CUDNN_STATUS_NOT_SUPPORTED,
    ),
    StubLib("libnccl.so.2", ("nccl.c",), None, D_NCCL, NCCL_INVALID_USAGE, ("nccl",)),
    StubLib("libcusparse.so.12", (), "libcusparse.so.12", D_OTHER, CUSPARSE_STATUS_NOT_SUPPORTED),
    StubLib("libcusparseLt.so.0", (), None, D_OTHER, CUSPARSE_STATUS_NOT_SUPPORTED, ("cusparseLt",)),
    StubLib("libcufft.so.12", (), "libcufft.so.12", D_OTHER, CUFFT_NOT_SUPPORTED),
    StubLib("libcusolver.so.12", (), "libcusolver.so.12", D_OTHER, CUSOLVER_STATUS_NOT_SUPPORTED),
    StubLib("libnvrtc.so.13", ("nvrtc.c",), "libnvrtc.so.13", D_OTHER, NVRTC_ERROR_INTERNAL_ERROR, header="nvrtc.h"),
    StubLib("libcupti.so.13", (), "libcupti.so.13", D_OTHER, CUPTI_ERROR_NOT_SUPPORTED),
    StubLib("libcufile.so.0", (), None, D_OTHER, CU_FILE_DRIVER_NOT_INITIALIZED, ("cuFile",)),
    StubLib("libnvshmem_host.so.3", (), "NVSHMEM", D_OTHER, NVSHMEM_ERROR, ("nvshmem",)),
    StubLib("libcurand.so.10", (), "libcurand.so.10", D_OTHER, CURAND_STATUS_ARCH_MISMATCH, ("curand",)),
    # torch, pynvml and nvidia-smi dlopen it by name: preloaded, the stub is the library they find. Both
    # the versioned (nvmlInit_v2) and the old names (nvmlInit) are exported.
    StubLib(
        "libnvidia-ml.so.1",
        ("nvml.c",),
        None,
        D_NVML,
        NVML_ERROR_NOT_SUPPORTED,
        ("nvml",),
        "nvml.h",
        ("-DNVML_NO_UNVERSIONED_FUNC_DEFS",),
    ),
)
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
"""The driver's libraries: the same names for every CUDA release, found by name (dlopen) as often as linked."""
PRELOAD = "preload.txt"
"""In a build: the stub libraries to LD_PRELOAD, core first, one a line."""
RELEASE = "release.json"
"""In a build: the CUDA release it stands in for (major, version, the SONAMEs and tags, the include folders)."""
CORE_SOURCES = (
    "config.c",
    "record.c",
    "host_read.c",
    "memory.c",
    "kernels.c",
    "graphs.c",
    "lifecycle.c",
    "device_attrs.c",
    "device_time.c",
    "completion.c",
    "children.c",
)
CORE = "libmaya_emu.so"
OPS_SOURCES = ("ops_observer.cpp", "host_values.cpp")
OPS = "libmaya_ops.so"
"""The framework-context observer, built against torch's C++ headers; the runner loads it after torch."""
TOOLS = ("nvidia-smi",)
"""Commands put first on an emulated rank's PATH (`bin/`), run by this Python (nvidia_smi.py)."""


def _site_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(
            f"package {package!r} is not installed: the emulator needs a CUDA build of torch "
            "(`pip install 'maya[torch]'` installs the current one with its headers)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def torch_libs() -> list[Path]:
    libs = sorted((_site_dir("torch") / "lib").glob("*.so"))
    if not any(p.name == "libtorch_cuda.so" for p in libs):
        raise BuildError(
            "torch has no libtorch_cuda.so: this is a CPU-only build of torch; the emulator "
            "needs a CUDA build (PyPI's torch on Linux, or `pip install 'maya[torch]'`)"
        )
    return libs


TE_LOADS = ("cudnn", "nvrtc", "curand", "cublas", "cudart")
"""The CUDA libraries Transformer Engine's import loads by path from the nvidia wheels (`ctypes.CDLL` of
`nvidia/.../lib/lib<name>*.so.*`): the real files, beside the preloaded stubs, so their references to a stubbed
library (libcurand's `cudaLibrary*`, libcublas's cuBLASLt internals) must resolve in the stubs."""


def framework_libs() -> list[Path]:
    """The libraries whose references the stubs must resolve: torch's, and where Transformer Engine is installed
    its own (`libtransformer_engine.so`, the `transformer_engine_torch` extension) and the nvidia wheels' libraries
    it loads (`TE_LOADS`)."""
    libs = torch_libs()
    spec = importlib.util.find_spec("transformer_engine")
    if spec is None or not spec.submodule_search_locations:
        return libs
    te_dir = Path(list(spec.submodule_search_locations)[0])
    site = te_dir.parent
    libs += sorted(te_dir.glob("**/*.so")) + sorted(site.glob("transformer_engine_torch*.so"))
    libs += sorted({p for name in TE_LOADS for p in (site / "nvidia").glob(f"**/lib/lib{name}*.so.*[0-9]")})
    return libs


@functools.cache
def _release(libs: tuple[Path, ...], stamp: str) -> CudaRelease:
    try:
        return detect(list(libs))
    except ReleaseError as e:
        raise BuildError(str(e)) from None


def cuda_release() -> CudaRelease:
    """The CUDA release the installed torch links (read once per process and torch installation)."""
    libs = tuple(torch_libs())
    return _release(libs, ";".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in libs))


def include_dirs() -> list[Path]:
    """The include folders of the CUDA release's headers the stubs build against (cuda_runtime_api.h's first)."""
    return list(cuda_release().include_dirs)


def stub_libs(release: CudaRelease) -> list[StubLib]:
    """LIBS as the installed torch links them: each renamed to the SONAME and version tag torch asks for;
    the ones it does not link left out, but for the driver's."""
    libs = []
    for lib in LIBS:
        if lib.soname in DRIVER_LIBS:
            libs.append(lib)
            continue
        soname = release.soname(lib.soname.split(".so")[0])
        if soname:
            libs.append(replace(lib, soname=soname, version_tag=release.linked[soname]))
    return libs


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise BuildError(
            f"Maya's emulator is built with the system C toolchain, and `{name}` was not "
            "found: install gcc, g++ and binutils (e.g. `apt-get install g++`)"
        )
    return path


def _run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise BuildError(f"command failed: {' '.join(cmd)}\n{p.stderr.strip()[-4000:]}")
    return p.stdout


def referenced_symbols(libs: list[Path], stubs: list[StubLib]) -> dict[str, set[str]]:
    """soname -> the symbols `libs` (framework_libs) reference from it."""
    nm = _tool("nm")
    by_tag = {lib.version_tag: lib.soname for lib in stubs if lib.version_tag}
    wanted: dict[str, set[str]] = {lib.soname: set() for lib in stubs}
    # longest prefix first: cuFile* belongs to libcufile, not to the driver's cu*
    prefixes = sorted(((p, lib.soname) for lib in stubs for p in lib.prefixes), key=lambda x: -len(x[0]))
    out = _run([nm, "-D", "--undefined-only", *map(str, libs)])
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 2 or parts[0] != "U":
            continue
        name, _, tag = parts[1].partition("@")
        if tag:
            if tag in by_tag:
                wanted[by_tag[tag]].add(name)
            continue
        for prefix, soname in prefixes:
            if name.startswith(prefix) and (prefix != "cu" or re.match(r"cu[A-Z]", name)):
                wanted[soname].add(name)
                break
    return wanted


def header_functions(header: Path) -> set[str]:
    """Functions a header declares (`CUresult CUDAAPI cuName(`, `cudaError_t CUDARTAPI cudaName(`,
    `cublasStatus_t CUBLASWINAPI cublasName(`, `nvmlReturn_t DECLDIR nvmlName(`, `nvrtcResult nvrtcName(`), so that
    entry-point lookups (`cudaGetDriverEntryPointByVersion`, Triton's dlsym, pynvml, torch's lazy NVRTC) resolve, a
    library torch does not link loads (bitsandbytes' references beyond torch's), and calls fail loudly, by name."""
    text = header.read_text(errors="replace")
    pattern = (
        r"\b(?:CUresult\s+CUDAAPI\s+(cu\w+)|cudaError_t\s+CUDARTAPI\s+(cuda\w+)"
        r"|cublasStatus_t\s+CUBLASWINAPI\s+(cublas\w+)|nvmlReturn_t\s+DECLDIR\s+(nvml\w+)"
        r"|nvrtcResult\s+(nvrtc\w+))\s*\("
    )
    # `#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2`: the declaration the compiler sees (and the
    # stubs implement) is the versioned one; a loud stub under the bare name would shadow it in entry-point lookups.
    # CUDA 12's runtime indents some, through a macro: `    #define cudaStreamGetCaptureInfo
    # __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v2)`.
    define = r"^[ \t]*#[ \t]*define[ \t]+(cu\w+)[ \t]+(?:__CUDART_API_PT\w*\()?(\1_v\d+)\)?[ \t]*$"
    renamed = dict(re.findall(define, text, re.MULTILINE))
    return {renamed.get(name, name) for names in re.findall(pattern, text) for name in names if name}


def _defined(obj: Path) -> set[str]:
    out = _run([_tool("nm"), "--defined-only", "-g", str(obj)])
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _unimplemented_source(lib: StubLib, names: list[str]) -> str:
    lines = ['#include "maya_emu.h"', ""]
    for n in names:
        lines.append(
            f'MAYA_EXPORT long {n}(void) {{ maya_unimplemented("{n}", {lib.domain}); return {lib.error_code}; }}'
        )
    return "\n".join(lines) + "\n"


def _cxx11_abi(torch_lib: Path) -> int:
    """1 if torch's C++ libraries use the C++11 string ABI: c10's own functions taking a std::string say
    `__cxx11` (torch >= 2.7 from PyPI), not `Ss` (the old ABI of torch <= 2.6; libstdc++'s inline
    functions carry `__cxx11` either way, so only c10's own symbols tell)."""
    out = _run([_tool("nm"), "-D", "--defined-only", str(torch_lib / "libc10.so")])
    own = [
        line.split()[-1] for line in out.splitlines() if line.split()[-1:] and line.split()[-1].startswith("_ZN3c10")
    ]
    return int(any("__cxx11" in name for name in own))


def _build_ops_observer(out_dir: Path, cxx: str) -> None:
    torch_dir = _site_dir("torch")
    torch_lib = torch_dir / "lib"
    if not (torch_dir / "include" / "ATen" / "record_function.h").exists():
        raise BuildError(f"torch's C++ headers are missing under {torch_dir / 'include'}: reinstall torch")
    # -DNDEBUG as torch release builds: RecordFunction has debug-only members, so it changes the layout
    _run(
        [
            cxx,
            "-O2",
            "-DNDEBUG",
            "-fPIC",
            "-std=c++20",
            "-fvisibility=hidden",
            "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(torch_lib)}",
            f"-I{torch_dir / 'include'}",
            "-shared",
            "-o",
            str(out_dir / OPS),
            *(str(NATIVE / src) for src in OPS_SOURCES),
            "-Wl,-soname," + OPS,
            f"-L{torch_lib}",
            "-ltorch_cpu",
            "-lc10",
            f"-Wl,-rpath,{torch_lib}",
            f"-L{out_dir}",
            "-l:" + CORE,
            "-Wl,-rpath,$ORIGIN",
        ]
    )


def _version_script(lib: StubLib, names: set[str]) -> str:
    body = "".join(f"    {n};\n" for n in sorted(names))
    tag = lib.version_tag or ""
    return f"{tag} {{\n" + (f"  global:\n{body}" if body else "") + "  local: *;\n};\n"


def build_key(cc: str, cxx: str) -> str:
    """Sources, torch's libraries, the nvidia wheels (the CUDA release and its headers), the compilers and
    this Python: cheap to compute (the release itself is read only to build)."""
    h = hashlib.sha256("\n".join(installed_wheels()).encode())
    for p in sorted(NATIVE.glob("*")):
        h.update(p.name.encode() + p.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(Path(release_module.__file__).read_bytes())
    for lib in framework_libs():
        st = lib.stat()
        h.update(f"{lib.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    h.update(_run([cc, "--version"]).encode())
    h.update(_run([cxx, "--version"]).encode())
    h.update(os.path.abspath(sys.executable).encode())  # the tools run it ("bin/../.venv/bin/python" is the same one)
    return h.hexdigest()[:16]


def build(cache_root: Path) -> Path:
    """Build (or reuse) the stub libraries; returns the directory holding them. Processes sharing a cache wait
    for one another (a lock per key): one builds, the others reuse its build."""
    cc, cxx = _tool(settings.CC.get() or "gcc"), _tool(settings.CXX.get() or "g++")
    key = build_key(cc, cxx)
    final = cache_root / key
    if (final / ".complete").exists():
        return final
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a killed holder's process ends
        if not (final / ".complete").exists():
            _build_into(final, key, cc, cxx)
    return final


def _build_into(final: Path, key: str, cc: str, cxx: str) -> None:
    """Compile the stubs in a temporary folder beside `final`, then rename it to `final` (atomic: a reader sees
    no build or a whole one)."""
    cache_root = final.parent
    release = cuda_release()
    stubs = stub_libs(release)
    incs = [f"-I{d}" for d in release.include_dirs] + [f"-I{NATIVE}"]
    cflags = ["-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter", "-std=gnu11"]
    wanted = referenced_symbols(framework_libs(), stubs)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_root))
    obj_dir = tmp / "obj"  # intermediates, kept for inspection beside the libraries
    obj_dir.mkdir()
    try:
        core_flags = [f for f in cflags if f != "-fvisibility=hidden"]  # the stubs link against all of it
        _run(
            [
                cc,
                *core_flags,
                *incs,
                "-shared",
                "-o",
                str(tmp / CORE),
                "-Wl,-soname," + CORE,
                *(str(NATIVE / s) for s in CORE_SOURCES),
                "-lpthread",
                "-ldl",
            ]
        )
        _build_ops_observer(tmp, cxx)
        for lib in stubs:
            objs = []
            for src in lib.sources:
                obj = obj_dir / (Path(src).stem + ".o")
                _run([cc, *cflags, *lib.cflags, *incs, "-c", "-o", str(obj), str(NATIVE / src)])
                objs.append(obj)
            implemented = set().union(*(_defined(o) for o in objs)) if objs else set()
            if lib.header:
                wanted[lib.soname] |= header_functions(release.header(lib.header))
            missing = sorted(wanted[lib.soname] - implemented)
            gen = obj_dir / f"unimplemented_{lib.soname}.c"
            gen.write_text(_unimplemented_source(lib, missing))
            vs = obj_dir / f"{lib.soname}.map"
            exported = implemented | wanted[lib.soname]
            vs.write_text(_version_script(lib, exported))
            _run(
                [
                    cc,
                    *cflags,
                    *incs,
                    "-shared",
                    "-o",
                    str(tmp / lib.soname),
                    *map(str, objs),
                    str(gen),
                    "-Wl,-soname," + lib.soname,
                    "-Wl,--version-script=" + str(vs),
                    f"-L{tmp}",
                    "-l:" + CORE,
                    "-Wl,-rpath,$ORIGIN",
                    "-ldl",
                ]
            )
        _write_tools(tmp / "bin")
        # the development link a driver install has: Triton < 3.4 links its launcher with -lcuda
        (tmp / "libcuda.so").symlink_to("libcuda.so.1")
        (tmp / PRELOAD).write_text("".join(f"{name}\n" for name in [CORE, *(lib.soname for lib in stubs)]))
        (tmp / RELEASE).write_text(
            json.dumps(
                {
                    "major": release.major,
                    "version": release.version,
                    "runtime_version": release.runtime_version,
                    "linked": {s: t for s, t in release.linked.items() if s in {lib.soname for lib in stubs}},
                    "include_dirs": [str(d) for d in release.include_dirs],
                },
                indent=1,
            )
        )
        (tmp / ".complete").write_text(key)
        try:
            tmp.rename(final)
        except OSError:  # built concurrently by another process: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_tools(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for tool in TOOLS:
        module = tool.replace("-", "_")
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m maya.emulator.{module} "$@"\n')
        path.chmod(0o755)


def built_release(lib_dir: Path) -> dict:
    """The CUDA release a build stands in for (its RELEASE file)."""
    return json.loads((lib_dir / RELEASE).read_text())


def preload_list(lib_dir: Path) -> list[str]:
    """The stub libraries to LD_PRELOAD, core first."""
    return [str(lib_dir / name) for name in (lib_dir / PRELOAD).read_text().split()]
