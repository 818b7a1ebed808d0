"""What a virtual GPU answers about memory shared between processes: switch multicast where the real board has it
(Hopper with NVSwitch, not PCIe cards or Ampere), and the multicast and shareable-handle APIs themselves, which it
does not emulate, fail loudly, naming themselves."""

import os
import re
import subprocess
import sys

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import settings
from maya.emulator.build import build
from maya.emulator.capture_format import CUDA_ERROR_NOT_SUPPORTED
from maya.emulator.nvidia_smi import nvlinks
from maya.emulator.unsupported import notes

MULTICAST_ATTRIBUTE = 132


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize(("hardware", "multicast"), [("h100-sxm", 1), ("h100-pcie", 0), ("a100-sxm-80gb", 0)])
def test_multicast_is_answered_as_the_board_would_and_not_emulated(tmp_path, hardware, multicast):
    r = CliRunner().invoke(
        app,
        ["emulate", "--out", str(tmp_path / "run"), "--hardware", hardware, "--", "python"]
        + [str(WORKLOADS / "multicast_query.py")],
    )
    answer = re.search(r"multicast (\d) posix_fd (\d) granularity status (\d+)", r.output)
    assert answer, r.output
    assert answer.groups() == (str(multicast), "1", str(CUDA_ERROR_NOT_SUPPORTED))
    assert "unimplemented CUDA API cuMulticastGetGranularity" in r.output


@pytest.mark.slow
def test_without_a_configuration_the_driver_answers_as_nvidia_smi_does(tmp_path):
    """No NVLink (nvidia-smi's answer without a config), so no switch multicast."""
    libcuda = build(settings.emulator_cache()) / "libcuda.so.1"
    query = (
        f"import ctypes; cuda = ctypes.CDLL({str(libcuda)!r}); cuda.cuInit(0); v = ctypes.c_int(-1); "
        f"cuda.cuDeviceGetAttribute(ctypes.byref(v), {MULTICAST_ATTRIBUTE}, 0); print(v.value)"
    )
    env = {k: v for k, v in os.environ.items() if k != "MAYA_EMU_CONFIG"}
    out = subprocess.run([sys.executable, "-c", query], env=env, capture_output=True, text=True, check=True)
    assert nvlinks(str(tmp_path / "no-config")) == (0, False)
    assert out.stdout.strip() == "0"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_torch_only_cuda_ipc_handle_fails_loudly_with_the_generic_note(tmp_path):
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(tmp_path / "run"), "--", "python", str(WORKLOADS / "cuda_ipc_share.py")]
    )
    assert r.exit_code != 0 and "shared" not in r.output.splitlines()  # the script stopped at the call
    (note,) = [line for line in r.output.splitlines() if line.startswith("note: cudaIpcGetMemHandle")]
    assert "not emulated" in note and "--tp-comm-overlap" not in note


TE_TRACEBACK = 'File ".../transformer_engine/pytorch/module/base.py", line 497, in initialize_ub'


def test_unemulated_peer_memory_names_userbuffers_only_where_transformer_engines_set_up_called_it():
    (note,) = notes({"cuMulticastGetGranularity", "cudaIpcGetMemHandle", "cusolverDnCreate"}, [TE_TRACEBACK])
    assert note.startswith("cuMulticastGetGranularity, cudaIpcGetMemHandle:")
    assert "--tp-comm-overlap" in note and "userbuffers" in note
    (generic,) = notes({"cudaIpcGetMemHandle"}, ['File ".../torch/multiprocessing/reductions.py", in reduce_tensor'])
    assert "not emulated" in generic and "--tp-comm-overlap" not in generic and "userbuffers" not in generic
    assert notes({"cusolverDnCreate"}, [TE_TRACEBACK]) == []
