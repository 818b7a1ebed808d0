"""Which symbols the stubs export: the functions a header declares under the names the compiler sees, and the
references of every library a framework loads beside torch (Transformer Engine's, and the nvidia wheels' it
loads by path)."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

from maya.emulator import build


def test_header_functions_take_the_versioned_name_a_define_gives(tmp_path):
    header = tmp_path / "cuda.h"
    header.write_text(
        "#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2\n"
        "CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);\n"
        "CUresult CUDAAPI cuInit(unsigned int Flags);\n"
    )
    assert build.header_functions(header) == {"cuDevicePrimaryCtxRelease_v2", "cuInit"}


def test_runtime_and_cublas_headers_give_every_function_under_its_compiled_name(tmp_path):
    """The runtime's and cuBLAS's declarations are read too (a library torch does not link, such as bitsandbytes'
    `cudaMemPrefetchAsync`, then finds a stub), with CUDA 12's per-thread-stream rename macro, indented as in its
    12.4 header."""
    header = tmp_path / "cuda_runtime_api.h"
    header.write_text(
        "    #define cudaStreamGetCaptureInfo       __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v2)\n"
        "extern __host__ cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream);\n"
        "extern __host__ __cudart_builtin__ cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void *devPtr);\n"
        "extern __host__ struct cudaChannelFormatDesc CUDARTAPI cudaCreateChannelDesc(int x);\n"
        "CUBLASAPI cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle);\n"
        "cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle);\n"
    )
    assert build.header_functions(header) == {
        "cudaStreamGetCaptureInfo_v2",
        "cudaMemPrefetchAsync",
        "cublasGemmEx",
        "cublasLtMatmul",
    }  # cudaCreateChannelDesc returns no status: not a stub's to answer


@pytest.mark.slow  # the stub build, where the session has not made it yet (~100 s)
def test_every_stub_with_a_header_exports_its_functions(emulator_cache):
    """The built runtime, driver, cuBLAS, cuBLASLt, NVRTC and NVML stubs export every status-returning function of
    their headers (`nm -D`): a library loaded beside torch (bitsandbytes') finds what it links."""
    lib_dir = build.build(emulator_cache)
    release = build.cuda_release()
    with_header = [lib for lib in build.stub_libs(release) if lib.header]
    assert {lib.soname.split(".so")[0] for lib in with_header} >= {"libcudart", "libcublas", "libcublasLt"}
    for lib in with_header:
        nm = subprocess.run(["nm", "-D", "--defined-only", str(lib_dir / lib.soname)], capture_output=True, text=True)
        exported = {line.split()[-1].split("@")[0] for line in nm.stdout.splitlines() if line.strip()}
        declared = build.header_functions(release.header(lib.header))
        assert declared and not declared - exported, (lib.soname, sorted(declared - exported)[:10])


def _fake_site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    for rel in [
        "torch/lib/libtorch_cuda.so",
        "transformer_engine/wheel_lib/libtransformer_engine.so",
        "transformer_engine_torch.cpython-311-x86_64-linux-gnu.so",
        "nvidia/cu13/lib/libcurand.so.10",
        "nvidia/cu13/lib/libcufft.so.12",
        "nvidia/cudnn/lib/libcudnn_graph.so.9",
    ]:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(b"")
    (site / "transformer_engine" / "__init__.py").write_text("")
    return site


def test_framework_libs_add_transformer_engine_and_the_libraries_it_loads(tmp_path, monkeypatch):
    site = _fake_site(tmp_path)
    monkeypatch.setattr(build, "_site_dir", lambda package: site / package)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "transformer_engine":
            return importlib.util.spec_from_file_location(
                name, site / name / "__init__.py", submodule_search_locations=[str(site / name)]
            )
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    names = [p.name for p in build.framework_libs()]
    assert names == [
        "libtorch_cuda.so",
        "libtransformer_engine.so",
        "transformer_engine_torch.cpython-311-x86_64-linux-gnu.so",
        "libcurand.so.10",
        "libcudnn_graph.so.9",
    ]  # libcufft: Transformer Engine does not load it


def test_framework_libs_are_torchs_without_transformer_engine(tmp_path, monkeypatch):
    site = _fake_site(tmp_path)
    monkeypatch.setattr(build, "_site_dir", lambda package: site / package)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformer_engine" else real_find_spec(name, *a)
    )
    assert [p.name for p in build.framework_libs()] == ["libtorch_cuda.so"]
