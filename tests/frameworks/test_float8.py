"""fp8 training as torchao's tensorwise recipe runs it (`tests/workloads/float8_mlp.py`, in plain PyTorch): its
GEMMs are recorded with their fp8 types and priced on the fp8 tensor-core peak (the tensor segment of the GEMM
family), its scaling kernels (amax, scale, cast) as elementwise and reduction work."""

import numpy as np
import pytest
from paths import WORKLOADS

from maya.core.hardware import get
from maya.estimators.hardware_table import hardware_arrays
from maya.estimators.segments import segments
from maya.simulator.opcodes import classify
from maya.simulator.trace import load
from maya.simulator.work import work_frame

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_float8_gemms_priced_on_fp8_peak(tmp_path, emulate_and_predict):
    out = tmp_path / "run"
    emulate_and_predict(out, ["python", str(WORKLOADS / "float8_mlp.py")])
    trace = load(out).ranks[0]
    frame = work_frame(trace, classify(trace.calls))
    gemms = frame[frame["family"] == "gemm"].copy()
    assert len(gemms) >= 18 and set(gemms["dtype"]) == {"fp8"}  # 2 linears x 3 GEMMs x 3 steps
    names = set(trace.ops.set_index("op_id").loc[trace.calls.loc[gemms.index, "op_id"], "name"])
    assert names == {"aten::_scaled_mm"}
    gemms["hardware"] = "h100-sxm"
    hw = hardware_arrays(gemms)
    assert (segments("gemm", gemms, hw) == "tensor").all()
    assert np.allclose(hw.peak_flops, get("h100-sxm").peak_flops("fp8"))
    assert get("h100-sxm").peak_flops("fp8") >= 1.9 * get("h100-sxm").peak_flops("bf16")
    scaling = set(frame.loc[frame["family"].isin(["elementwise", "reduction"]), "family"])
    assert scaling == {"elementwise", "reduction"}  # abs/amax/reciprocal/clamp/mul around each GEMM
