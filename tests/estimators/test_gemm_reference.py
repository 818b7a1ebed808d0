"""The tensor-core GEMM price anchored to public cuBLAS rows: which parts, which calls, by how much, and for which
estimator versions (those whose tensor-core GEMMs were learned from Vidur's harness, each with its own ratios)."""

import hashlib
import io
import json
import zipfile

import numpy as np
import pandas as pd
import pytest

from maya.estimators import TrainConfig, gemm_reference, train
from maya.estimators import artifact as artifact_format
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.gemm_reference import (
    MIN_FLOPS,
    V1,
    Reference,
    public_gemm_rows,
    reference_of,
    reference_rows,
    time_factor,
    uncalibrated,
)
from maya.estimators.hardware_table import hardware_arrays

SMALL = TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)
SIZES = (2048.0, 3072.0, 4096.0, 6144.0, 8192.0)


def gemms(hw: str, dtype: str = "bf16") -> pd.DataFrame:
    """Square-ish GEMMs of every size pair on `hw`, timed at 231 TFLOP/s (Vidur's A100 at 8192^3)."""
    sizes = [(m, n, 8192.0) for m in SIZES for n in SIZES]
    frame = pd.DataFrame(sizes, columns=["m", "n", "k"]).assign(hardware=hw, family="gemm", op="mm", dtype=dtype)
    return frame.assign(measured_ns=2 * frame["m"] * frame["n"] * frame["k"] / 231e12 * 1e9)


@pytest.fixture(scope="module")
def estimator():
    """Trained on "Vidur's" rows of an A100 SXM and an A40: the A100 gets its own reference, the A40 none (no public
    cuBLAS row)."""
    measured = pd.concat([gemms("a100-sxm-80gb"), gemms("a40")], ignore_index=True).assign(source="vidur")
    return train(measured, SMALL).estimator


def ratio_of(estimator, part: str) -> float:
    (ratio,) = [r.ratio for r in estimator.gemm_references.references if r.part == part]
    return ratio


def test_a_version_trained_on_vidurs_rows_derives_its_own_ratio_over_the_public_rows(estimator):
    """The A100's ratio is the median of the version's learned time over the measured time of the part's public
    reference rows (gpu-fryer's two 8192^3 rows), stored with those rows and the sources its GEMMs learned from."""
    rows = reference_rows(public_gemm_rows())
    a100 = rows[rows["hardware"] == "a100-sxm-80gb"]
    learned = uncalibrated(estimator).predict(a100.drop(columns=["measured_ns"]))["duration_ns"].to_numpy()
    (reference,) = estimator.gemm_references.references
    assert reference.part == "a100-sxm-80gb" and reference.rows == tuple(a100["row_id"])
    assert reference.ratio == pytest.approx(np.median(learned / a100["measured_ns"].to_numpy()))
    assert reference.ratio != pytest.approx(V1.references[0].ratio, abs=1e-3)  # its own, not v1's
    assert reference.sources == ("gpu_fryer_1.1.0",)
    assert estimator.gemm_references.learned_from == {"a100-sxm-80gb": ("vidur",), "a40": ("vidur",)}
    assert reference_of("h100-sxm", estimator.gemm_references.references) is None  # never measured: no reference


@pytest.mark.parametrize("source", [None, "profiles:my-a100"])
def test_a_version_trained_without_vidurs_harness_gets_no_reference_and_says_so(source):
    """A user's own measurements of a reference part (or rows of no named source) carry their harness, not Vidur's:
    the version prices its GEMMs at the learned price alone, and its references say why."""
    measured = gemms("a100-sxm-80gb")
    if source is not None:
        measured = measured.assign(source=source)
    mine = train(measured, SMALL).estimator
    name = source or gemm_reference.UNNAMED_SOURCE
    assert mine.gemm_references.references == ()
    assert mine.gemm_references.learned_from == {"a100-sxm-80gb": (name,)}
    assert mine.gemm_references.note == f"none: the tensor-core GEMMs were learned from {name}, not vidur"
    calls = pd.DataFrame({"m": [8192.0, 4000.0], "n": [8192.0, 5000.0], "k": [8192.0, 3000.0]}).assign(
        hardware="a100-sxm-80gb", family="gemm", op="mm", dtype="bf16"
    )
    assert mine.predict(calls)["duration_ns"].tolist() == uncalibrated(mine).predict(calls)["duration_ns"].tolist()


def test_only_parts_vidur_measured_get_a_reference():
    """Vidur's rows on an A40 and a user's own on an A100: the A100's public rows say nothing of the A40's harness,
    so no part gets a reference."""
    measured = pd.concat(
        [gemms("a40").assign(source="vidur"), gemms("a100-sxm-80gb").assign(source="profiles:mine")], ignore_index=True
    )
    references = train(measured, SMALL).estimator.gemm_references
    assert references.references == ()
    assert references.learned_from == {"a100-sxm-80gb": ("profiles:mine",), "a40": ("vidur",)}
    assert references.note == "none: no public cuBLAS reference rows on the parts vidur measured"


def test_the_harness_source_is_vidurs():
    from maya.estimators.vidur_data import SOURCE

    assert gemm_reference.HARNESS_SOURCE == SOURCE


def without_references(raw: bytes) -> bytes:
    """The artifact as one from before references were stored: its manifest without them."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                del manifest["gemm_references"]
                data = json.dumps(manifest, sort_keys=True).encode()
            new.writestr(info, data)
    return out.getvalue()


def test_the_artifact_keeps_a_versions_references_and_an_old_one_has_v1s_only_if_it_is_v1s(estimator, monkeypatch):
    """References round-trip through the artifact; an artifact that predates them gets v1's constants when its
    SHA-256 is v1's artifact's (which they were read off), none otherwise: what an older version learned from is
    not known."""
    raw = artifact_format.dumps(estimator)
    assert artifact_format.loads(raw).gemm_references == estimator.gemm_references
    assert artifact_format.gemm_references(raw) == estimator.gemm_references
    old = without_references(raw)
    loaded = artifact_format.loads(old)
    assert loaded.gemm_references == gemm_reference.NOT_RECORDED and loaded.gemm_references.references == ()
    call = gemms("a100-sxm-80gb").iloc[[-1]].drop(columns="measured_ns")
    assert loaded.predict(call)["duration_ns"].iat[0] == uncalibrated(estimator).predict(call)["duration_ns"].iat[0]
    monkeypatch.setattr(gemm_reference, "V1_ARTIFACT_SHA256", hashlib.sha256(old).hexdigest())
    as_v1 = artifact_format.loads(old)
    assert as_v1.gemm_references == V1
    assert as_v1.predict(call)["duration_ns"].iat[0] == pytest.approx(
        uncalibrated(estimator).predict(call)["duration_ns"].iat[0] / 1.104
    )


def test_a_compute_bound_gemm_on_a_reference_part_runs_at_the_public_rate(estimator):
    call = gemms("a100-sxm-80gb").iloc[[-1]].drop(columns="measured_ns")  # 8192^3, measured: the exact lookup
    learned = uncalibrated(estimator).predict(call)
    calibrated = estimator.predict(call)
    assert learned["method"].iat[0] == calibrated["method"].iat[0] == "lookup"
    assert learned["duration_ns"].iat[0] == pytest.approx(2 * 8192.0**3 / 231e12 * 1e9)
    ratio = ratio_of(estimator, "a100-sxm-80gb")
    assert calibrated["duration_ns"].iat[0] == pytest.approx(learned["duration_ns"].iat[0] / ratio)
    assert calibrated["duration_low_ns"].iat[0] == pytest.approx(
        max(learned["duration_low_ns"].iat[0] / ratio, calibrated["roofline_ns"].iat[0])
    )


def test_parts_of_another_envelope_keep_the_learned_price(estimator):
    for part in ("a40", "a100-pcie-40gb"):  # no public cuBLAS row; a PCIe part's cap binds lower
        call = gemms(part).iloc[[-1]].drop(columns="measured_ns")
        assert (
            estimator.predict(call)["duration_ns"].iat[0] == uncalibrated(estimator).predict(call)["duration_ns"].iat[0]
        )


def test_the_same_silicon_and_power_share_a_reference():
    a100, h100 = V1.references
    assert reference_of("a100-sxm-40gb", V1.references) is reference_of("a800-sxm-80gb", V1.references) is a100
    assert reference_of("h800", V1.references) is reference_of("h200", V1.references) is h100
    for part in ("a100-pcie-40gb", "a100-pcie-80gb", "h100-pcie", "h100-nvl", "a40", "b200", "l40s"):
        assert reference_of(part, V1.references) is None


def test_only_the_time_the_tensor_cores_set_in_a_reference_dtype_speeds_up():
    calls = pd.DataFrame(
        {
            "hardware": "h100-sxm",
            "family": "gemm",
            "dtype": ["bf16", "bf16", "fp32", "fp8"],
            "m": [8192.0, 8192.0, 8192.0, 8192.0],
            "n": [8192.0, 256.0, 8192.0, 8192.0],  # compute-bound, memory-bound, fp32 (CUDA cores), fp8
            "k": [8192.0, 8192.0, 8192.0, 8192.0],
        }
    )
    hw = hardware_arrays(calls)
    flops = 2 * calls["m"] * calls["n"] * calls["k"]
    moved = 2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])
    h100 = Reference("h100-sxm", 1.06, ("row",), ("source",))
    factor = time_factor(calls["dtype"], hw, flops.to_numpy(), moved.to_numpy(), (h100,))
    ratio = h100.ratio
    assert factor[0] == pytest.approx(1 / ratio)
    share = (flops[1] / hw.peak_flops[1]) / (moved[1] / hw.bandwidth[1])  # most of its roofline is memory's
    assert share < 1 and factor[1] == pytest.approx(1 - share + share / ratio) and factor[0] < factor[1] < 1
    assert factor[2] == factor[3] == 1.0  # fp8's kernels were not among the reference rows


def test_reference_rows_are_compute_bound_cublas_rows_neither_selected_nor_power_capped_on_hopper():
    def row(source, impl, hw="h100-sxm", dtype="bf16", size=8192.0):
        return {"source": f"kp:{source}", "impl": impl, "hardware": hw, "dtype": dtype, "m": size, "n": size, "k": size}

    rows = pd.DataFrame(
        [
            row("zzc_issue79_h100", "torch.matmul (cuBLAS)"),
            row("zzc_issue79_h100", "torch.matmul (cuBLAS)", size=1024.0),  # launch-bound
            row("fastcu_readme", "fast.cu best hand-written kernel"),  # not cuBLAS
            row("mamf_table", "torch.mm (cuBLAS/cuBLASLt)"),  # a sweep's best shape
            row("gpu_fryer_1.1.0", "cuBLASLt"),  # Hopper at its sustained clock
            row("gpu_fryer_1.1.0", "cuBLASLt", hw="a100-sxm-80gb"),  # Ampere: no burst/sustained gap
            row("gpu_fryer_1.1.0", "cuBLASLt", dtype="fp8"),
        ]
    ).assign(batch=np.nan)
    chosen = reference_rows(rows)
    assert chosen.index.tolist() == [0, 5]


def test_a_launch_bound_gemm_keeps_the_learned_price_a_large_one_the_reference(estimator):
    """The reference rows are all >= MIN_FLOPS: a 512^3 bf16 GEMM (launch-bound) on an A100 keeps its learned time,
    an 8192^3 one is scaled by the part's ratio (the version's own)."""
    calls = pd.DataFrame({"m": [512.0, 8192.0], "n": [512.0, 8192.0], "k": [512.0, 8192.0]}).assign(
        hardware="a100-sxm-80gb", family="gemm", op="mm", dtype="bf16"
    )
    assert 2 * 512.0**3 < MIN_FLOPS <= 2 * 8192.0**3
    learned = uncalibrated(estimator).predict(calls)["duration_ns"].to_numpy()
    calibrated = estimator.predict(calls)["duration_ns"].to_numpy()
    assert calibrated[0] == learned[0]
    assert calibrated[1] == pytest.approx(learned[1] / ratio_of(estimator, "a100-sxm-80gb"))
    hw = hardware_arrays(calls)
    flops = 2 * calls["m"] * calls["n"] * calls["k"]
    moved = 2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])
    factor = time_factor(calls["dtype"], hw, flops.to_numpy(), moved.to_numpy(), estimator.gemm_references.references)
    assert factor[0] == 1.0 and factor[1] == pytest.approx(1 / ratio_of(estimator, "a100-sxm-80gb"))


def test_the_reference_ramps_in_over_the_decade_below_min_flops_without_a_step():
    """Between MIN_FLOPS / 10 and MIN_FLOPS the ratio grows with log10 of FLOPs: no price step at either edge, and a
    compute-bound GEMM's calibrated time keeps growing with its size."""
    sizes = np.geomspace(256.0, 8192.0, 200)  # square: compute-bound from ~470 on an A100 in bf16
    calls = pd.DataFrame({"m": sizes, "n": sizes, "k": sizes}).assign(
        hardware="a100-sxm-80gb", family="gemm", dtype="bf16"
    )
    hw = hardware_arrays(calls)
    flops = (2 * calls["m"] * calls["n"] * calls["k"]).to_numpy()
    moved = (2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])).to_numpy()
    factor = time_factor(calls["dtype"], hw, flops, moved, V1.references)
    ratio = V1.references[0].ratio
    assert (factor[flops <= MIN_FLOPS / 10] == 1.0).all()
    full = flops >= MIN_FLOPS
    compute_bound = full & (flops / hw.peak_flops >= moved / hw.bandwidth)
    assert factor[compute_bound] == pytest.approx(1 / ratio)
    ramp = (flops > MIN_FLOPS / 10) & ~full
    assert ramp.any() and ((factor[ramp] < 1.0) & (factor[ramp] > 1 / ratio - 1e-12)).all()
    assert np.abs(np.diff(factor)).max() < 0.01  # no step anywhere along the sweep
    roofline = np.maximum(flops / hw.peak_flops, moved / hw.bandwidth)
    assert (np.diff(roofline * factor) > 0).all()


def test_a_roofline_price_carries_no_harness_and_is_not_calibrated():
    """Only prices made from measurements (looked up or learned) carry the measuring harness the reference corrects:
    a GEMM priced at its roofline band keeps its band on a reference part, the high end included."""
    from maya.estimators import KernelEstimator
    from maya.estimators.efficiency_model import Band

    calls = pd.DataFrame({"m": [8192.0], "n": [8192.0], "k": [8192.0]}).assign(
        hardware="h100-sxm", family="gemm", op="mm", dtype="bf16"
    )
    on = KernelEstimator(roofline_bands={"gemm": Band(0.0, 0.4)}, gemm_references=V1).predict(calls)
    off = KernelEstimator(roofline_bands={"gemm": Band(0.0, 0.4)}).predict(calls)
    assert on["method"].tolist() == ["roofline"]
    for column in ("duration_ns", "duration_low_ns", "duration_high_ns"):
        assert on[column].tolist() == off[column].tolist()


@pytest.mark.slow
def test_a_version_is_reused_only_with_the_same_sources_and_public_reference_rows(maya_home, monkeypatch):
    """The data hash sees neither the rows' `source` labels nor the public rows a reference is derived from: the
    same calls relabelled, or a changed public reference row, train a new version instead of reusing one whose
    ratios were derived from other inputs."""
    from maya.estimators.versioning import train_version

    vidur = gemms("a100-sxm-80gb").assign(source="vidur")
    first = train_version(vidur, SMALL)
    assert train_version(vidur, SMALL).reused
    mine = train_version(vidur.assign(source="profiles:mine"), SMALL)
    assert not mine.reused and mine.record.data_hash == first.record.data_hash
    public = public_gemm_rows()
    (row,) = np.flatnonzero(
        public["row_id"] == reference_rows(public).query("hardware == 'a100-sxm-80gb'")["row_id"].iloc[0]
    )
    monkeypatch.setattr(
        gemm_reference,
        "public_gemm_rows",
        lambda: public.assign(
            measured_ns=public["measured_ns"].where(public.index != row, public["measured_ns"] * 1.1)
        ),
    )
    moved = train_version(vidur, SMALL)
    assert not moved.reused and [first.record.version, mine.record.version, moved.record.version] == ["v1", "v2", "v3"]


def test_the_uncalibrated_copy_is_not_the_registered_artifacts_and_keeps_no_stored_attention_fit(estimator):
    """It prices GEMMs differently, so it must not share the artifact's stored attention fit (named by its SHA)."""
    from dataclasses import replace

    from maya.estimators import attention_model

    registered = replace(estimator, artifact_sha256="a" * 64)
    assert attention_model.stored_fit(registered) is not None
    assert uncalibrated(registered).artifact_sha256 is None
    assert attention_model.stored_fit(uncalibrated(registered)) is None
