"""The CUDA release the stubs are built for: read from torch's libraries and the nvidia wheels."""

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from maya.emulator import build, cuda_release
from maya.emulator.cuda_release import CudaRelease, ReleaseError

TORCH_2_5_CU124 = {  # what readelf reports for torch 2.5.1's libraries (PyPI, CUDA 12.4), CUDA part
    "libcudart.so.12": "libcudart.so.12",
    "libcublas.so.12": "libcublas.so.12",
    "libcublasLt.so.12": "libcublasLt.so.12",
    "libcudnn.so.9": "libcudnn.so.9",
    "libnccl.so.2": None,
    "libcusparse.so.12": "libcusparse.so.12",
    "libcufft.so.11": "libcufft.so.11",
    "libcusolver.so.11": "libcusolver.so.11",
    "libcurand.so.10": None,
    "libnvrtc.so.12": "libnvrtc.so.12",
    "libcupti.so.12": "libcupti.so.12",
    "libcuda.so.1": None,
    "libcusparseLt-294d6944.so.0": None,
    "libc10.so": None,
    "libstdc++.so.6": None,
}


TORCH_PULLS = {"nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cudnn", "nvidia-nccl", "nvidia-cuda-nvrtc"}
"""Header wheels every torch from PyPI requires itself (directly for CUDA 12, through cuda-toolkit's cudart,
cublas and nvrtc extras for CUDA 13), whatever its release."""


def test_the_extras_install_every_header_wheel_torch_does_not_require():
    """torch 2.11 (CUDA 13.0) pulls no nvidia-cuda-cccl: torch 2.15 had it only through nvshmem 3.7, so the
    stubs could not be built for 2.11 until `cu13` named it."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for major, headers in cuda_release.HEADERS.items():
        named = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in extras[cuda_release.EXTRA[major]]}
        needed = {w for w in headers.values() if re.sub(r"-cu\d+$", "", w) not in TORCH_PULLS}
        assert needed <= named, f"cu{major} misses {sorted(needed - named)}"


def test_every_header_a_stub_reads_is_one_detect_requires():
    """A stub's header (its functions get loud stubs) is found by `detect`, which names its wheel where it is
    missing; a header it did not check gave `CudaRelease.header` nothing to return (cublasLt.h: StopIteration)."""
    read = {lib.header for lib in build.LIBS if lib.header}
    for major, headers in cuda_release.HEADERS.items():
        assert read <= set(headers), f"CUDA {major}: {sorted(read - set(headers))}"


def _installed_release() -> CudaRelease:
    try:
        return build.cuda_release()
    except build.BuildError as e:
        pytest.skip(f"no CUDA build of torch with its headers here: {e}")


def test_the_installed_torch_is_read_from_its_libraries():
    release = _installed_release()
    cudart = release.soname("libcudart")
    assert cudart == f"libcudart.so.{release.major}"
    assert release.linked[cudart] == cudart  # torch binds its runtime references to the SONAME's tag
    assert release.runtime_version // 1000 == release.major
    assert release.linked["libnccl.so.2"] is None  # NCCL's symbols are unversioned
    for header in ("cuda_runtime_api.h", "cuda.h", "crt/host_defines.h", "cudnn.h", "nccl.h", "nvrtc.h", "nvml.h"):
        assert release.header(header).is_file()


def test_stubs_take_the_names_and_tags_torch_links():
    release = CudaRelease(12, 12040, TORCH_2_5_CU124, ())
    libs = {lib.soname: lib for lib in build.stub_libs(release)}
    assert libs["libcudart.so.12"].version_tag == "libcudart.so.12"
    assert libs["libcudart.so.12"].sources[0] == "cudart.c"
    assert libs["libcufft.so.11"].version_tag == "libcufft.so.11"  # cuFFT 11 ships with CUDA 12
    assert libs["libcusparseLt-294d6944.so.0"].prefixes == ("cusparseLt",)  # auditwheel's hashed copy
    assert libs["libcurand.so.10"].version_tag is None
    assert {"libcuda.so.1", "libnvidia-ml.so.1"} <= set(libs)  # the driver's, whatever the release
    # what this torch does not link gets no stub
    assert not any(name.startswith(("libcufile", "libnvshmem", "libcudart.so.13")) for name in libs)


def test_the_runtime_stub_compiles_against_the_headers_of_cuda_13_0(tmp_path):
    """torch 2.11 links CUDA 13.0, whose driver_types.h lacks cudaErrorStreamDetached (13.1) and
    cudaErrorVersionTranslation (13.2): the installed 13.x headers, those two taken out and CUDART_VERSION set to
    13000, compile cudart.c (its error table guards them by CUDART_VERSION)."""
    release = _installed_release()
    if release.major != 13:
        pytest.skip(f"the installed torch links CUDA {release.major}")
    original = release.header("cuda_runtime_api.h").parent
    older = tmp_path / "include"
    older.mkdir()
    for entry in original.iterdir():  # the rest of the folder as it is ("driver_types.h" is included by quotes)
        if entry.name not in ("cuda_runtime_api.h", "driver_types.h"):
            (older / entry.name).symlink_to(entry)
    (older / "cuda_runtime_api.h").write_text(
        re.sub(r"(#define\s+CUDART_VERSION\s+)\d+", r"\g<1>13000", (original / "cuda_runtime_api.h").read_text())
    )
    (older / "driver_types.h").write_text(
        re.sub(
            r"\n\s*cudaError(StreamDetached|VersionTranslation)\s*=\s*\d+,",
            "",
            (original / "driver_types.h").read_text(),
        )
    )
    assert "cudaErrorStreamDetached" not in (older / "driver_types.h").read_text()
    includes = [f"-I{older}", *(f"-I{d}" for d in release.include_dirs if d != original), f"-I{build.NATIVE}"]
    for source in ("cudart.c", "cudart12.c"):
        p = subprocess.run(
            ["gcc", "-fsyntax-only", "-std=gnu11", *includes, str(build.NATIVE / source)],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stderr[-2000:]


def test_the_installed_release_builds_every_library_torch_links():
    release = _installed_release()
    stubbed = {lib.soname for lib in build.stub_libs(release)}
    cuda_stems = {lib.soname.split(".so")[0] for lib in build.LIBS}
    linked = {s for s in release.linked if cuda_release._stem(s) in cuda_stems}
    assert linked <= stubbed


def _fake_release(monkeypatch, linked: dict, dirs: list[Path]) -> None:
    monkeypatch.setattr(cuda_release, "linked_libraries", lambda libs: linked)
    monkeypatch.setattr(cuda_release, "release_include_dirs", lambda major: dirs)


def test_a_missing_header_names_the_wheel_to_install(tmp_path, monkeypatch):
    include = tmp_path / "cuda_runtime" / "include"
    include.mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 12040\n")
    (include / "cuda.h").write_text("")
    _fake_release(monkeypatch, TORCH_2_5_CU124, [include])
    with pytest.raises(
        ReleaseError,
        match=r"crt/host_defines.h for torch's CUDA 12 .*`nvidia-cuda-nvcc-cu12`"
        r".*maya\[cu12\]",
    ):
        cuda_release.detect([])


def test_the_headers_of_the_release_are_found(tmp_path, monkeypatch):
    dirs = []
    for package, headers in {
        "cuda_runtime": ["cuda_runtime_api.h", "cuda.h"],
        "cuda_nvcc": ["crt/host_defines.h"],
        "cuda_cccl": ["nv/target"],
        "cublas": ["cublas_api.h", "cublasLt.h"],
        "cudnn": ["cudnn.h"],
        "nccl": ["nccl.h"],
        "cuda_nvrtc": ["nvrtc.h"],
        "nvml_dev": ["nvml.h"],
        "cufft": ["cufft.h"],
    }.items():
        include = tmp_path / package / "include"
        for header in headers:
            (include / header).parent.mkdir(parents=True, exist_ok=True)
            (include / header).write_text("#define CUDART_VERSION 12040\n" if header == "cuda_runtime_api.h" else "")
        dirs.append(include)
    _fake_release(monkeypatch, TORCH_2_5_CU124, dirs)
    release = cuda_release.detect([])
    assert (release.major, release.runtime_version) == (12, 12040)
    assert release.include_dirs[0] == tmp_path / "cuda_runtime" / "include"
    assert tmp_path / "cufft" / "include" not in release.include_dirs  # only the folders of needed headers


@pytest.mark.parametrize(
    "linked, message",
    [
        ({"libcudart.so.11.0": "libcudart.so.11.0"}, r"built for CUDA 11; .* CUDA 12 or 13"),
        ({"libc10.so": None}, r"links no libcudart"),
    ],
)
def test_releases_that_cannot_be_emulated_say_why(monkeypatch, linked, message):
    _fake_release(monkeypatch, linked, [])
    with pytest.raises(ReleaseError, match=message):
        cuda_release.detect([])
