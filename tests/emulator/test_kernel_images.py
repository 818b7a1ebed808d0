"""The kernel image a virtual GPU runs: cudaFuncGetAttributes reports the versions of the image in the fat
binary the device would load (an L4, sm_89, runs torch's sm_86 cubins), not the device's compute capability.
CUB dispatches on that PTX version and fails with cudaErrorInvalidDeviceFunction when it names no
architecture the code was compiled for: BERT-large's backward on a virtual L4 died that way, as "CUDA error:
unknown error", since the runtime stub had no name for code 98."""

from pathlib import Path

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()


def emulate(out: Path, hardware: str):
    return runner.invoke(
        app, ["emulate", "--out", str(out), "--hardware", hardware, "--", "python", str(WORKLOADS / "cub_sort.py")]
    )


ERROR_NAMES = {  # code: "cudaGetErrorName | cudaGetErrorString", as the workload prints them
    98: "cudaErrorInvalidDeviceFunction | invalid device function",
    209: "cudaErrorNoKernelImageForDevice | no kernel image is available for execution on the device",
    401: "cudaErrorIllegalState | the operation cannot be performed in the present state",
    901: "cudaErrorStreamCaptureInvalidated | operation failed due to a previous error during capture",
    12345: "unrecognized error code | unrecognized error code",
}
FALLBACK_NOTICE = "maya emulator: the CUDA code has no kernel image for sm_"


@pytest.mark.parametrize(
    "hardware",
    [
        "l4",  # sm_89: no sm_89 image in torch's wheels; the sm_86 one runs
        "a100-pcie-80gb",  # sm_80: an exact image
        "v100-sxm-32gb",  # sm_70: older than every image (a real one would fail); emulated with the nearest
    ],
)
def test_cub_dispatch_finds_the_image_the_device_runs(tmp_path, hardware):
    out = tmp_path / hardware
    r = emulate(out, hardware)
    assert r.exit_code == 0, r.output
    assert Run(out).info["status"] == "complete"
    log = (out / "logs" / "rank0.txt").read_text()
    assert "cub ok" in log
    if hardware.startswith("v100"):
        assert FALLBACK_NOTICE + "70" in log and "nearest image, sm_75" in log
    else:
        assert FALLBACK_NOTICE not in log
    errors = {int(line.split()[1]): line.split(" ", 2)[2] for line in log.splitlines() if line.startswith("error ")}
    assert errors == ERROR_NAMES
