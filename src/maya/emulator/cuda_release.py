"""The CUDA release the installed torch was built for, read from its libraries and the nvidia wheels.

torch's libraries name each CUDA library they link by SONAME (`libcudart.so.12`, `libcufft.so.11`,
`libcublas.so.13`, auditwheel's `libcusparseLt-294d6944.so.0`) and bind their references to a version
tag (mostly the SONAME itself; NVSHMEM's is `NVSHMEM`). The headers of that release are in the nvidia
wheels of the same CUDA major: `nvidia-*-cu12` for CUDA 12, the unsuffixed 13.x wheels (and
`nvidia-cudnn-cu13`, `nvidia-nccl-cu13`) for CUDA 13. The emulator's stubs are built for exactly these
(build.py): one per linked SONAME, carrying its tag, compiled against that release's headers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HEADERS = {
    12: {
        "cuda_runtime_api.h": "nvidia-cuda-runtime-cu12",
        "cuda.h": "nvidia-cuda-runtime-cu12",
        "crt/host_defines.h": "nvidia-cuda-nvcc-cu12",
        "nv/target": "nvidia-cuda-cccl-cu12",
        "cublas_api.h": "nvidia-cublas-cu12",
        "cublasLt.h": "nvidia-cublas-cu12",
        "cudnn.h": "nvidia-cudnn-cu12",
        "nccl.h": "nvidia-nccl-cu12",
        "nvrtc.h": "nvidia-cuda-nvrtc-cu12",
        "nvml.h": "nvidia-nvml-dev-cu12",
    },
    13: {
        "cuda_runtime_api.h": "nvidia-cuda-runtime",
        "cuda.h": "nvidia-cuda-runtime",
        "crt/host_defines.h": "nvidia-cuda-crt",
        "nv/target": "nvidia-cuda-cccl",
        "cublas_api.h": "nvidia-cublas",
        "cublasLt.h": "nvidia-cublas",
        "cudnn.h": "nvidia-cudnn-cu13",
        "nccl.h": "nvidia-nccl-cu13",
        "nvrtc.h": "nvidia-cuda-nvrtc",
        "nvml.h": "nvidia-nvml-dev",
    },
}
"""Per CUDA major the emulator supports: every header the stubs include or read (build.StubLib.header) -> the wheel
that carries it."""
EXTRA = {12: "cu12", 13: "cu13"}
"""Maya's extra that installs the header wheels torch itself does not pull, per CUDA major."""


class ReleaseError(RuntimeError):
    """torch's CUDA release cannot be emulated here; the message says what is missing."""


@dataclass(frozen=True)
class CudaRelease:
    major: int
    """CUDA major torch links (`libcudart.so.<major>`)."""
    runtime_version: int
    """CUDART_VERSION of the headers (12040 for CUDA 12.4)."""
    linked: dict[str, str | None]
    """SONAME every torch library links -> the version tag torch's references to it carry (None: unversioned)."""
    include_dirs: tuple[Path, ...]
    """The include folders of that release's nvidia wheels that hold `HEADERS`, in its order."""

    def soname(self, stem: str) -> str | None:
        """The SONAME torch links for a library stem (`libcudart` -> `libcudart.so.12`), None if it does
        not link one. auditwheel's hashed copies (`libcusparseLt-294d6944.so.0`) match their stem."""
        found = [s for s in self.linked if _stem(s) == stem]
        return found[0] if found else None

    def header(self, name: str) -> Path:
        """The path of one of `HEADERS` in this release (`detect` found each in `include_dirs`)."""
        return next(d / name for d in self.include_dirs if (d / name).exists())

    @property
    def version(self) -> str:
        """ "12.4", "13.2": the release of the headers (the runtime torch pulls)."""
        return f"{self.runtime_version // 1000}.{self.runtime_version % 1000 // 10}"


def _stem(soname: str) -> str:
    return re.sub(r"-[0-9a-f]{8}$", "", soname.split(".so")[0])


def linked_libraries(libs: list[Path]) -> dict[str, str | None]:
    """SONAME -> version tag for every library `libs` link (DT_NEEDED), from one `readelf` over them all."""
    readelf = shutil.which("readelf")
    if not readelf:
        raise ReleaseError("`readelf` was not found: install binutils (e.g. `apt-get install binutils`)")
    p = subprocess.run(
        [readelf, "--dynamic", "--version-info", "--wide", *map(str, libs)], capture_output=True, text=True
    )
    if p.returncode:
        raise ReleaseError(f"readelf cannot read torch's libraries: {p.stderr.strip()[-2000:]}")
    linked: dict[str, str | None] = dict.fromkeys(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout))
    # version needs: "File: libcudart.so.12  Cnt: 1" followed by its "Name: libcudart.so.12" lines
    for file, names in re.findall(r"File: (\S+)\s+Cnt: \d+\n((?:\s+0x[0-9a-f]+:\s+Name: .*\n)*)", p.stdout):
        tags = re.findall(r"Name: (\S+)", names)
        if len(tags) == 1 and not re.match(r"(GLIBC|GCC|CXXABI|GLIBCXX|GOMP|OMP)_", tags[0]):
            linked[file] = tags[0]
    return linked


def _dist_major(dist: metadata.Distribution) -> int | None:
    """The CUDA major an nvidia wheel belongs to: its `-cuNN` suffix, else its version's major."""
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if not name.startswith("nvidia-"):
        return None
    suffix = re.search(r"-cu(\d+)$", name)
    if suffix:
        return int(suffix.group(1))
    major = re.match(r"(\d+)\.", dist.version or "")
    return int(major.group(1)) if major else None


def release_include_dirs(major: int) -> list[Path]:
    """The include folders of the installed nvidia wheels of CUDA `major` (the first `include` folder
    of each file they installed)."""
    dirs: set[Path] = set()
    for dist in metadata.distributions():
        if _dist_major(dist) != major:
            continue
        prefixes = {f.parts[: f.parts.index("include") + 1] for f in dist.files or () if "include" in f.parts[:-1]}
        dirs.update(Path(dist.locate_file(Path(*p))).resolve() for p in prefixes)
    return sorted(d for d in dirs if d.is_dir())


def installed_wheels() -> list[str]:
    """The nvidia wheels installed (their dist-info folders' names: name and version), cheaply: what the
    headers `detect` would find depend on."""
    found = set()
    for entry in sys.path:
        try:
            found.update(
                e.name
                for e in os.scandir(entry or ".")
                if e.name.startswith("nvidia_") and e.name.endswith(".dist-info")
            )
        except OSError:
            continue
    return sorted(found)


def _runtime_version(header: Path) -> int:
    m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header.read_text(errors="replace"))
    if not m:
        raise ReleaseError(f"{header} defines no CUDART_VERSION")
    return int(m.group(1))


def detect(torch_libs: list[Path]) -> CudaRelease:
    """The CUDA release `torch_libs` (torch/lib/*.so) link, with the include folders of its headers.
    Fails naming the wheel to install when a header the stubs need is missing."""
    linked = linked_libraries(torch_libs)
    cudart = [s for s in linked if _stem(s) == "libcudart"]
    if not cudart:
        raise ReleaseError("torch links no libcudart: this build of torch does not use CUDA")
    major = int(re.search(r"\.so\.(\d+)", cudart[0]).group(1))
    if major not in HEADERS:
        raise ReleaseError(
            f"torch is built for CUDA {major}; Maya's emulator supports torch built for CUDA "
            f"{' or '.join(map(str, HEADERS))} (torch 2.5 or newer from PyPI)"
        )
    dirs = release_include_dirs(major)
    chosen: list[Path] = []
    for header, package in HEADERS[major].items():
        found = [d for d in dirs if (d / header).exists()]
        if not found:
            raise ReleaseError(
                f"missing {header} for torch's CUDA {major} libraries: install `{package}` "
                f"(`pip install 'maya[{EXTRA[major]}]'` installs the header wheels the emulator "
                "needs without touching torch)"
            )
        chosen.extend(d for d in found[:1] if d not in chosen)
    return CudaRelease(major, _runtime_version(chosen[0] / "cuda_runtime_api.h"), linked, tuple(chosen))
