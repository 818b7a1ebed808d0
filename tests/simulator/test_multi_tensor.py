"""Multi-tensor kernels (optimizer steps, gradient norms, scales) sized by their launch grid and torch's dropout kernels
framed by the bytes they move (`simulator/multi_tensor.py`, `simulator/work.py`), on synthetic traces; priced by an
estimator trained on a sample of the shipped measurements, their time follows their traffic."""

import numpy as np
import pandas as pd
import pytest
from simulator.test_work_shapes import frame, write_trace

from maya.estimators import TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.training_data import shipped_measurements
from maya.simulator.multi_tensor import CHUNK_ELEMENTS, traffic
from maya_trace_spec.vocabulary import classify_kernel

TE_ADAM = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi4ELb0EEN18transformer_engine17multi_tensor_adam11AdamFunctor"
    "IffffiEEJffffffNS3_10adamMode_tEfEEvlPViT_T0_DpT1_"
)
TE_L2NORM = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi1ELb0EEN18transformer_engine19multi_tensor_l2norm13L2Norm"
    "FunctorIfEEJPfS6_biEEvlPViT_T0_DpT1_"
)
TE_SCALE_TO_HALF = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi2ELb0EEN18transformer_engine18multi_tensor_scale12Scale"
    "FunctorIf6__halfEEJfEEvlPViT_T0_DpT1_"
)
ATEN_UNSCALE = (
    "_ZN2at6native46_GLOBAL__N__3be26839_13_AmpKernels_cu_3810c27325multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi1EEENS1_14UnaryOpFunctorIfLi1ELi1ELi0EEEJZZZNS0_47_amp_foreach_non_finite_check_and_unscale_cuda_E"
)
ATEN_ADD_OUT = (
    "_ZN2at6native57_GLOBAL__N__multi_tensor_apply_kernelINS1_18TensorListMetadataILi3EEENS1_24BinaryOpListAlpha"
    "FunctorIN3c108BFloat16ELi3ELi2ELi2EEEJSt4plusIfEfEEEvT_T0_DpT1_"
)
DROPOUT_FWD = (
    "_ZN2at6native43_GLOBAL__N__1131530d_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIN3c104HalfEfjLi1ELi8EbEEv"
    "NS_4cuda6detail10TensorInfoIKT_T1_EENS7_IS8_SA_EENS7_IT4_SA_EESA_T0_NS_15PhiloxCudaStateE"
)
DROPOUT_BWD = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_43_GLOBAL__N__1131530d_10_Dropout_cu_0e96ed3819masked_"
    "scale_kernelIbN3c104HalfEfEEvRNS_6TensorERKS6_S9_T1_EUlS5_bE_St5arrayIPcLm3EELb0EEEviT0_SA_"
)


def test_each_kind_moves_its_lists_once_per_element():
    """Adam reads gradient, parameter and both moments and writes all but the gradient; a norm reads its list; a
    scale reads one list and writes another (fp32 in, fp16 out, as its functor's types say); ATen's foreach functors read
    their `r_args_depth` lists and write one."""
    assert traffic(TE_ADAM) == (7 * 4, 4.0, "fp32")
    assert traffic(TE_L2NORM) == (4, 1.0, "fp32")
    assert traffic(TE_SCALE_TO_HALF) == (4 + 2, 1.0, "fp32")  # fp32 main parameters to fp16 model ones
    assert traffic(ATEN_UNSCALE) == (2 * 4, 1.0, "fp32")  # in place: read and written
    assert traffic(ATEN_ADD_OUT) == (3 * 2, 2.0, "bf16")  # two lists in, the third out
    assert traffic(DROPOUT_FWD) is None and traffic("multi_tensor_apply_kernel") is None  # no depth: unsized


def adam_run(tmp_path, blocks: list[int]):
    """One rank stepping TE's fused Adam (`te::multi_tensor_adam(chunk, noop_flag, tensor_lists, ...)`: its lists carry
    no sizes) in launches of `blocks` chunks each."""
    ops = [
        {"op_id": 0, "name": "te::multi_tensor_adam", "input_shapes": [[], [1], []], "input_dtypes": ["", "int", ""]}
    ]
    launches = [{"kernel_id": 0, "op_id": 0, "grid_x": b} for b in blocks]
    (tmp_path / str(len(blocks))).mkdir()
    return write_trace(tmp_path / str(len(blocks)), [TE_ADAM], ops, launches, ["optimizer"])


def test_a_multi_tensor_launch_is_sized_by_its_grid(tmp_path):
    f = frame(adam_run(tmp_path, [320, 7]))
    assert f["family"].tolist() == ["elementwise"] * 2 and f["op"].tolist() == ["multi_tensor"] * 2
    assert f["numel"].tolist() == [320 * CHUNK_ELEMENTS, 7 * CHUNK_ELEMENTS]
    assert f["work_bytes"].tolist() == [28 * 320 * CHUNK_ELEMENTS, 28 * 7 * CHUNK_ELEMENTS]
    assert f["dtype"].tolist() == ["fp32"] * 2 and f["operands"].tolist() == [4.0] * 2


def dropout_run(tmp_path):
    """Attention-score dropout [4, 8, 2048, 2048] fp16, forward and backward, its forward kernel stored as `other`
    (as traces captured before the vocabulary named it hold it)."""
    scores = [4, 8, 2048, 2048]
    ops = [
        {"op_id": 0, "name": "aten::native_dropout", "input_shapes": [scores, [], []], "input_dtypes": ["c10::Half"]},
        {
            "op_id": 1,
            "name": "aten::native_dropout_backward",
            "input_shapes": [scores, scores, []],
            "input_dtypes": ["c10::Half", "bool", "Scalar"],
        },
    ]
    launches = [{"kernel_id": 0, "op_id": 0}, {"kernel_id": 1, "op_id": 1}]
    return write_trace(tmp_path, [DROPOUT_FWD, DROPOUT_BWD], ops, launches, ["other", "elementwise"])


def test_torch_dropout_moves_its_input_its_output_and_a_one_byte_mask(tmp_path):
    assert classify_kernel(DROPOUT_FWD)["family"] == "elementwise"
    f = frame(dropout_run(tmp_path))
    numel = 4 * 8 * 2048 * 2048
    assert f["family"].tolist() == ["elementwise"] * 2
    assert f["op"].tolist() == ["native_dropout", "native_dropout_backward"]
    assert f["operands"].tolist() == [1.0, 2.0]
    assert f["work_bytes"].tolist() == [numel * 5.0] * 2  # fp16 in and out, the bool mask written / read


@pytest.fixture(scope="module")
def estimator():
    measured = shipped_measurements()
    rows = measured[measured["family"] == "elementwise"]
    rows = rows.sample(frac=1.0, random_state=0).groupby(["hardware", "family", "op", "dtype"]).head(40)
    return train(rows.reset_index(drop=True), TrainConfig(params=ModelParams(n_estimators=30, max_depth=4))).estimator


def test_an_optimizer_step_is_priced_by_its_traffic(tmp_path, estimator):
    """Ten times the chunks take about ten times as long, and no launch beats its bytes at the GPU's bandwidth (an
    unsized launch cost the same whatever its grid)."""
    f = frame(adam_run(tmp_path, [32, 320]))
    calls = f.rename(columns={"work_bytes": "bytes"}).assign(hardware="a100-sxm-80gb")
    priced = estimator.predict(calls)
    small, large = priced["duration_ns"].to_numpy()
    assert 7 < large / small <= 10.5
    assert (priced["duration_ns"] >= priced["roofline_ns"]).all()
    assert large > calls["bytes"].iloc[1] / 2.039e12 * 1e9  # the A100 80GB's 2,039 GB/s


def test_dropout_is_priced_as_the_add_moving_its_bytes(tmp_path, estimator):
    f = frame(dropout_run(tmp_path))
    calls = f.rename(columns={"work_bytes": "bytes"}).assign(hardware="a100-sxm-80gb")
    priced = estimator.predict(calls)["duration_ns"].to_numpy()
    add = pd.DataFrame(
        [{"family": "elementwise", "op": "add", "dtype": "fp16", "numel": 4 * 8 * 2048 * 2048 * 5 / 6, "operands": 2}]
    ).assign(hardware="a100-sxm-80gb", row=2048)
    same_bytes = float(estimator.predict(add)["duration_ns"].iloc[0])
    assert np.allclose(priced, same_bytes, rtol=0.1)
