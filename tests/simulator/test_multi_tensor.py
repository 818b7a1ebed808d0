"""Multi-tensor kernels (optimizer steps, gradient norms, scales) sized by their launch grid and torch's dropout kernels
framed by the bytes they move (`simulator/multi_tensor.py`, `simulator/work.py`), on synthetic traces; priced by an
estimator trained on a sample of the shipped measurements, their time follows their traffic.

ATen's kernel names are from torch 2.15's `libtorch_cuda.so`; TE's and apex's (not installed here) as g++ mangles their
sources' templates (`transformer_engine/common/multi_tensor/adam.cu`, apex's `multi_tensor_scale_kernel.cu` and
`fused_dropout` kernel) instantiated with the types named; demangled spellings as `c++filt` writes them."""

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from simulator.test_work_shapes import frame, write_trace

from maya.simulator.multi_tensor import CHUNK_ELEMENTS, traffic
from maya_trace_spec.vocabulary import classify_kernel

TE_ADAM = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi4ELb0EEN18transformer_engine17multi_tensor_adam11AdamFunctor"
    "IffffiEEJffffffNS3_10adamMode_tEfEEvlPViT_T0_DpT1_"
)
TE_ADAM_BF16 = (  # AdamFunctor<bf16 params, bf16 grads, fp32 full, fp32 moments, int>
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi4ELb0EEN18transformer_engine17multi_tensor_adam11AdamFunctor"
    "I13__nv_bfloat16S5_ffiEEJffffffNS3_10adamMode_tEfEEvlPViT_T0_DpT1_"
)
TE_ADAM_MASTER = (  # the same with an fp32 master copy: the bf16 parameter written, not read
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi5ELb0EEN18transformer_engine17multi_tensor_adam17AdamFunctor"
    "MasterI13__nv_bfloat16S5_ffiEEJffffffNS3_10adamMode_tEfEEvlPViT_T0_DpT1_"
)
TE_L2NORM = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi1ELb0EEN18transformer_engine19multi_tensor_l2norm13L2Norm"
    "FunctorIfEEJPfS6_biEEvlPViT_T0_DpT1_"
)
TE_SCALE_TO_HALF = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi2ELb0EEN18transformer_engine18multi_tensor_scale12Scale"
    "FunctorIf6__halfEEJfEEvlPViT_T0_DpT1_"
)
APEX_SCALE_TO_HALF = (
    "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi2ELb0EE12ScaleFunctorIfN3c104HalfEEJfEEvlPViT_T0_DpT1_"
)
ATEN_UNSCALE = (
    "_ZN2at6native46_GLOBAL__N__3be26839_13_AmpKernels_cu_3810c27325multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi1EEENS1_14UnaryOpFunctorIfLi1ELi1ELi0EEEJZZZNS0_47_amp_foreach_non_finite_check_and_unscale_cuda_E"
    "N3c108ArrayRefINS_6TensorEEERS9_RKS9_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEEvT_T0_DpT1_"
)
ATEN_POW_LIST = (  # _foreach_pow(list, list): two lists read, the third written
    "_ZN2at6native55_GLOBAL__N__f86471ef_22_ForeachBinaryOpList_cu_a911ec4325multi_tensor_apply_kernelINS1_18Tensor"
    "ListMetadataILi3EEENS1_24BinaryOpListAlphaFunctorIN3c108BFloat16ELi3ELi2ELi2EEEJNS1_13power_functorIfEEfEEEvT_T0_"
    "DpT1_"
)
ATEN_ADDCDIV_SCALARS = (  # _foreach_addcdiv_ with a scalar per tensor (torch's foreach Adam): 3 lists read, 1 written
    "_ZN2at6native54_GLOBAL__N__ae7e1889_21_ForeachPointwiseOp_cu_ef478fac25multi_tensor_apply_kernelINS1_28TensorList"
    "ScalarListMetadataIfLi3EEENS1_28PointwiseOpScalarListFunctorIN3c108BFloat16ELi3ELi3ELi0EEEJSt7dividesIfEEEEvT_T0_"
    "DpT1_"
)
ATEN_ZERO = (
    "_ZN2at6native50_GLOBAL__N__637ba612_17_ForeachUnaryOp_cu_77fe623d25multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi1EEENS1_11ZeroFunctorIN3c108BFloat16ELi1ELi1ELi0EEEJEEEvT_T0_DpT1_"
)
ATEN_L2NORM = (
    "_ZN2at6native51_GLOBAL__N__99dedba0_18_ForeachReduceOp_cu_b83ec48c25multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi1EEENS0_13LpNormFunctorIN3c108BFloat16ELNS0_8NormTypeE2ES7_Li1ELi1ELi0EEEJPfPKlEEEvT_T0_DpT1_"
)
ATEN_MAX = (
    "_ZN2at6native51_GLOBAL__N__99dedba0_18_ForeachReduceOp_cu_b83ec48c25multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi1EEENS0_12LpMaxFunctorIN3c108BFloat16ELi1ELi1ELi0EEEJPS7_PKlEEEvT_T0_DpT1_"
)
ATEN_SGD_MOMENTUM = (
    "_ZN2at6native50_GLOBAL__N__169a4528_17_FusedSgdKernel_cu_a550329a25multi_tensor_apply_kernelINS1_18TensorList"
    "MetadataILi3EEENS1_19FusedSgdMathFunctorIfLi3EEEJddPfddbbbS7_S7_EEEvT_T0_DpT1_"
)
ATEN_ADAGRAD = (
    "_ZN2at6native54_GLOBAL__N__890b71a8_21_fused_adagrad_impl_cu_7510a93525multi_tensor_apply_kernelINS1_32Fused"
    "OptimizerTensorListMetadataILi3EEENS1_23FusedAdagradMathFunctorIfEEJPKfddddbS8_S8_EEEvT_T0_DpT1_"
)
ATEN_ADAMW_MP = (  # FusedAdamMathFunctorMP<scalar f, param f, grad f, exp_avg bf16, exp_avg_sq bf16, max f, 4, ...>
    "_ZN2at6native52_GLOBAL__N__1f580294_19_fused_adamw_impl_cu_8b44fa2325multi_tensor_apply_kernelINS1_32Fused"
    "OptimizerTensorListMetadataILi4EEENS1_22FusedAdamMathFunctorMPIfffN3c108BFloat16ES7_fLi4ELNS0_9ADAM_MODEE1ELb0EE"
    "EJPKfdddddbSB_SB_EEEvT_T0_DpT1_"
)
DROPOUT_FWD = (
    "_ZN2at6native43_GLOBAL__N__1131530d_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIN3c104HalfEfjLi1ELi8EbEEv"
    "NS_4cuda6detail10TensorInfoIKT_T1_EENS7_IS8_SA_EENS7_IT4_SA_EESA_T0_NS_15PhiloxCudaStateE"
)
DROPOUT_BWD = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_43_GLOBAL__N__1131530d_10_Dropout_cu_0e96ed3819masked_"
    "scale_kernelIbN3c104HalfEfEEvRNS_6TensorERKS6_S9_T1_EUlS5_bE_St5arrayIPcLm3EELb0EEEviT0_SA_"
)
FILL_MASK = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIbEESt5arrayIPcLm1EELb0EEEviT0_T1_"
APEX_DROPOUT = "_Z25apex_fused_dropout_kernelIN3c104HalfEfjEvPKT_PS2_PhT1_T0_St4pairImmE"

TRAFFIC = {
    TE_ADAM: (7 * 4, "fp32"),  # gradient, parameter, moments read; all but the gradient written
    TE_ADAM_BF16: (2 + 2 * 2 + 2 * 4 * 2, "fp32"),  # bf16 gradient and parameter, fp32 moments
    TE_ADAM_MASTER: (2 + 2 + 2 * 4 * 3, "fp32"),  # bf16 gradient read, bf16 parameter written, fp32 moments and master
    TE_L2NORM: (4, "fp32"),  # read only
    TE_SCALE_TO_HALF: (4 + 2, "fp32"),  # fp32 main parameters to fp16 model ones
    APEX_SCALE_TO_HALF: (4 + 2, "fp32"),
    ATEN_UNSCALE: (2 * 4, "fp32"),  # in place: read and written
    ATEN_POW_LIST: (3 * 2, "bf16"),
    ATEN_ADDCDIV_SCALARS: (4 * 2, "bf16"),
    ATEN_ZERO: (2, "bf16"),  # written only
    ATEN_L2NORM: (2, "bf16"),
    ATEN_MAX: (2, "bf16"),
    ATEN_SGD_MOMENTUM: (5 * 4, "fp32"),  # parameter, gradient, momentum read; parameter and momentum written
    ATEN_ADAGRAD: (5 * 4, "fp32"),  # parameter, gradient, state sum read; parameter and state sum written
    ATEN_ADAMW_MP: (2 * 4 + 4 + 2 * 2 * 2, "fp32"),  # fp32 parameter and gradient, bf16 moments
}


@pytest.mark.parametrize("kernel", TRAFFIC)
def test_each_kind_moves_each_list_once_per_element_of_its_type(kernel):
    """Each list read moves one pass of its own type, each list written another."""
    assert traffic(kernel) == TRAFFIC[kernel]


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="binutils' c++filt demangles the names")
@pytest.mark.parametrize("kernel", TRAFFIC)
def test_a_demangled_name_moves_what_its_mangled_one_does(kernel):
    """Kineto's traces hold demangled names."""
    demangled = subprocess.run(["c++filt"], input=kernel, capture_output=True, text=True, check=True).stdout.strip()
    assert demangled.startswith("void ") and traffic(demangled) == TRAFFIC[kernel]


ATEN_COPY_INT16 = (
    "_ZN2at6native55_GLOBAL__N__f86471ef_22_ForeachBinaryOpList_cu_a911ec4325multi_tensor_apply_kernelINS1_18Tensor"
    "ListMetadataILi2EEENS1_14UnaryOpFunctorIsLi2ELi1ELi1EEEJNS0_4CopyIssEEEEEvT_T0_DpT1_"
)
ATEN_SUB_COMPLEX = (  # the functor's type a substitution of the metadata's complex<float>
    "_ZN2at6native61_GLOBAL__N__832b9cb6_28_ForeachBinaryOpScalarList_cu_dda10a6925multi_tensor_apply_kernelINS1_28"
    "TensorListScalarListMetadataIN3c107complexIfEELi2EEENS1_25BinaryOpScalarListFunctorIS6_Li2ELi1ELi1EEEJSt5minus"
    "IS6_EEEEvT_T0_DpT1_"
)


CUT_IN_A_SUBSTITUTION = ATEN_UNSCALE[: ATEN_UNSCALE.index("NS1_14") + 3]


@pytest.mark.parametrize(
    "kernel", [DROPOUT_FWD, "multi_tensor_apply_kernel", ATEN_COPY_INT16, ATEN_SUB_COMPLEX, CUT_IN_A_SUBSTITUTION]
)
def test_a_kernel_not_naming_its_lists_or_their_size_is_unsized(kernel):
    """Not a multi-tensor kernel, no depth in the name, an element type without a size (int16, complex), a name cut
    short (as a profiler may store it): not guessed."""
    assert traffic(kernel) is None


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
    assert f["work_bytes"].tolist() == [28 * 320 * CHUNK_ELEMENTS, 28 * 7 * CHUNK_ELEMENTS]
    # as the fp32 add moving those bytes: two inputs and an output of a third of them each
    assert np.allclose(f["numel"], [28 * 320 * CHUNK_ELEMENTS / 12, 28 * 7 * CHUNK_ELEMENTS / 12], rtol=1e-12)
    assert f["dtype"].tolist() == ["fp32"] * 2 and f["operands"].tolist() == [2.0] * 2


def dropout_run(tmp_path):
    """Attention-score dropout [4, 8, 2048, 2048] fp16, forward and backward, its forward kernel stored as `other`
    (as traces captured before the vocabulary named it hold it), and a dropout not training (a mask of ones filled)."""
    scores = [4, 8, 2048, 2048]
    ops = [
        {"op_id": 0, "name": "aten::native_dropout", "input_shapes": [scores, [], []], "input_dtypes": ["c10::Half"]},
        {
            "op_id": 1,
            "name": "aten::native_dropout_backward",
            "input_shapes": [scores, scores, []],
            "input_dtypes": ["c10::Half", "bool", "Scalar"],
        },
        {"op_id": 2, "name": "aten::native_dropout", "input_shapes": [scores, [], []], "input_dtypes": ["c10::Half"]},
    ]
    launches = [{"kernel_id": 0, "op_id": 0}, {"kernel_id": 1, "op_id": 1}, {"kernel_id": 2, "op_id": 2}]
    return write_trace(
        tmp_path, [DROPOUT_FWD, DROPOUT_BWD, FILL_MASK], ops, launches, ["other", "elementwise", "elementwise"]
    )


def test_torch_dropout_moves_its_input_its_output_and_a_one_byte_mask(tmp_path):
    """Framed as the fp16 add moving those bytes; other kernels inside a dropout keep their own sizes."""
    assert classify_kernel(DROPOUT_FWD)["family"] == "elementwise"
    f = frame(dropout_run(tmp_path))
    numel = 4 * 8 * 2048 * 2048
    assert f["family"].tolist() == ["elementwise"] * 3
    assert f["op"].tolist() == ["native_dropout", "native_dropout_backward", "native_dropout"]
    assert f["work_bytes"].tolist()[:2] == [numel * 5.0] * 2  # fp16 in and out, the bool mask written / read
    assert f["numel"].tolist() == [numel * 5 / 6] * 2 + [numel] and f["operands"].tolist()[:2] == [2.0] * 2


def test_apex_dropout_is_not_taken_for_torch_s():
    """apex's kernel runs inside apex's own ops, whose sizes are not its tensor's: it stays unsized."""
    assert classify_kernel(APEX_DROPOUT)["family"] != "elementwise"


def test_an_optimizer_step_is_priced_by_its_traffic(tmp_path, estimator):
    """Ten times the chunks take about ten times as long, none faster than its bytes allow (an unsized launch cost the
    same whatever its grid)."""
    f = frame(adam_run(tmp_path, [32, 320]))
    calls = f.rename(columns={"work_bytes": "bytes"}).assign(hardware="a100-sxm-80gb")
    priced = estimator.predict(calls)
    small, large = priced["duration_ns"].to_numpy()
    assert 7 < large / small <= 10.5
    assert (priced["duration_ns"] >= priced["roofline_ns"]).all()


@pytest.mark.parametrize(
    "hardware", ["h100-sxm", *(pytest.param(hw, marks=pytest.mark.slow) for hw in ("a100-sxm-80gb", "h200"))]
)
def test_optimizer_and_dropout_cost_what_an_add_moving_their_bytes_costs(tmp_path, estimator, hardware):
    """An fp32 add of a twelfth of Adam's bytes an element, an fp16 add of a sixth of dropout's, as the shipped
    measurements frame torch's add (two inputs, one output)."""
    adam = frame(adam_run(tmp_path, [320]))
    dropout = frame(dropout_run(tmp_path)).iloc[:2]
    calls = pd.concat([adam, dropout]).rename(columns={"work_bytes": "bytes"}).assign(hardware=hardware)
    priced = estimator.predict(calls)["duration_ns"].to_numpy()
    numel = 4 * 8 * 2048 * 2048
    adds = pd.DataFrame(
        [
            {"dtype": "fp32", "numel": 28 * 320 * CHUNK_ELEMENTS / 12, "row": CHUNK_ELEMENTS},
            {"dtype": "fp16", "numel": numel * 5 / 6, "row": 2048},
            {"dtype": "fp16", "numel": numel * 5 / 6, "row": 2048},
        ]
    ).assign(family="elementwise", op="add", operands=2, hardware=hardware)
    same_bytes = estimator.predict(adds)["duration_ns"].to_numpy()
    assert np.allclose(priced, same_bytes, rtol=0.01)
