"""GEMM pricing bias per source, GPU, dtype and size: the kernel estimator's GEMM prices against every shipped GEMM
measurement, signed.

Sources: Vidur's fp16 operators (H100 SXM, A100 SXM4 80GB, A40; device time), NeuSight's fp32 `linear` / `bmm`
(training and test splits; calls timed one by one, compared with `isolated_ns`) and the public kernel measurements
(`data/kernels_public/`: cuBLAS square sweeps, short-loop and sustained, Triton and DeepGEMM fp8; device time).

Sections:
1. the estimator version (`--estimator-version`, default latest) and the analytical roofline per source, GPU, dtype
   and FLOP bin, split into calls inside the sizes measured on that GPU in its segment (tensor cores or CUDA cores:
   every one of batch, m, n, k within the shipped rows' range), outside them, or on a GPU never measured in that
   segment (a transfer); error = predicted / measured - 1 (mean signed, mean |error|);
2. leave-one-GPU-out: the GEMM family trained (a seeded sample of `--sample` shipped GEMM rows) without one GPU's rows,
   tested on that GPU's Vidur or NeuSight rows (a seeded sample) and its public rows, by the learned price alone (the
   GPU's public rows are its reference calibration): the transfer to a GPU not measured (`--skip-logo` skips it;
   ~25 CPU-s per fold);
3. the public cuBLAS reference rows per part against the estimator, with and without the reference calibration
   (`maya.estimators.gemm_reference`): how far the learned tensor-core price sits from public cuBLAS on the same part.

    nice -n 10 .venv/bin/python benchmarks/gemm_bias.py [--estimator-version v1] [--skip-logo] [--sample N]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from maya.estimators import Registry
from maya.estimators.evaluation import comparable_ns
from maya.estimators.gemm_reference import public_gemm_rows, reference_rows, uncalibrated
from maya.estimators.hardware_table import catalog_names, hardware_arrays
from maya.estimators.kernel_estimator import KernelEstimator
from maya.estimators.neusight_data import load_kernels, neusight_dir
from maya.estimators.segments import segments
from maya.estimators.training import TrainConfig, train
from maya.estimators.training_data import shipped_measurements
from maya.estimators.vidur_data import load_compute

FLOP_BINS = (0, 1e8, 1e9, 1e10, 1e11, 1e12, 1e15)
"""FLOPs per call: launch-bound, small, the ramp, and the compute-bound plateau."""
SIZE_COLUMNS = ("batch", "m", "n", "k")
PRICE_COLUMNS = ("hardware", "family", "op", "dtype", "batch", "m", "n", "k")
LOGO_GPUS = ("a100-sxm-80gb", "h100-sxm", "a40", "a100-pcie-40gb", "v100-pcie-32gb")
"""GPUs left out in turn in section 2 (the first three: Vidur's tensor-core rows; the last two: NeuSight's fp32)."""
TEST_ROWS = 3000
"""Rows of the held-out GPU tested per source in section 2 (a seeded sample)."""


def gemm_rows() -> pd.DataFrame:
    """Every shipped GEMM measurement as a measured call with its `source` (vidur, neusight-train, neusight-test,
    kp:<source_id>) and `timing`."""
    vidur = load_compute().calls
    vidur = vidur[vidur["family"] == "gemm"].assign(source="vidur")
    neusight = pd.concat(
        [
            load_kernels(neusight_dir() / f"kernels_{s}.parquet").assign(source=f"neusight-{s}")
            for s in ("train", "test")
        ]
    )
    neusight = neusight[neusight["family"] == "gemm"]
    frame = pd.concat([vidur, neusight, public_gemm_rows()], ignore_index=True)
    frame["hardware"] = catalog_names(frame["hardware"].astype(str))
    frame["timing"] = frame["timing"].fillna("device")
    return frame


def priced(estimator: KernelEstimator, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with `predicted_ns` (comparable with the measurement), `roofline_ns`, `method` and `error`."""
    p = estimator.predict(rows[list(PRICE_COLUMNS)])
    return rows.assign(
        predicted_ns=comparable_ns(p, rows["timing"]),
        roofline_ns=p["roofline_ns"].to_numpy(),
        method=p["method"].to_numpy(),
        error=comparable_ns(p, rows["timing"]) / rows["measured_ns"].to_numpy() - 1,
        roofline_error=p["roofline_ns"].to_numpy() / rows["measured_ns"].to_numpy() - 1,
    )


def regimes(rows: pd.DataFrame, trained: pd.DataFrame) -> pd.DataFrame:
    """`rows` with `segment`, `flop_bin` and `sizes`: inside / outside the sizes `trained` measured on the same GPU
    and segment, or `unmeasured GPU`."""
    hw = hardware_arrays(rows.assign(family="gemm"))
    segment = segments("gemm", rows, hw)
    trained_segment = segments("gemm", trained, hardware_arrays(trained.assign(family="gemm")))
    keyed = trained.assign(segment=trained_segment, batch=trained["batch"].fillna(1.0))
    low = keyed.groupby(["hardware", "segment"])[list(SIZE_COLUMNS)].min().add_suffix("_min")
    high = keyed.groupby(["hardware", "segment"])[list(SIZE_COLUMNS)].max().add_suffix("_max")
    values = rows.assign(batch=rows["batch"].fillna(1.0), segment=segment)
    limits = values[["hardware", "segment"]].join(pd.concat([low, high], axis=1), on=["hardware", "segment"])
    measured = limits["m_min"].notna().to_numpy()
    inside = np.ones(len(rows), dtype=bool)
    for c in SIZE_COLUMNS:
        inside &= (values[c] >= limits[f"{c}_min"]).to_numpy() & (values[c] <= limits[f"{c}_max"]).to_numpy()
    sizes = np.where(measured, np.where(inside, "inside", "outside"), "unmeasured GPU")
    flops = 2 * values["batch"] * rows["m"] * rows["n"] * rows["k"]
    return rows.assign(
        segment=segment,
        sizes=sizes,
        flop_bin=pd.cut(flops, FLOP_BINS, labels=["<1e8", "1e8-1e9", "1e9-1e10", "1e10-1e11", "1e11-1e12", ">1e12"]),
    )


def summary(group: pd.DataFrame) -> pd.Series:
    return pd.Series(
        {
            "rows": len(group),
            "signed": group["error"].mean(),
            "mape": group["error"].abs().mean(),
            "roofline_signed": group["roofline_error"].mean(),
        }
    )


def print_table(frame: pd.DataFrame, by: list[str]) -> None:
    table = frame.groupby(by, observed=True, sort=True).apply(summary, include_groups=False)
    out = table.assign(
        rows=table["rows"].astype(int),
        signed=table["signed"].map("{:+.1%}".format),
        mape=table["mape"].map("{:.1%}".format),
        roofline_signed=table["roofline_signed"].map("{:+.1%}".format),
    )
    print(out.to_string())


def source_group(source: pd.Series) -> pd.Series:
    """Vidur, NeuSight (train / test) or the public rows, by kind."""
    return source.where(~source.str.startswith("kp:"), "public")


def section_bias(
    estimator: KernelEstimator, rows: pd.DataFrame, trained: pd.DataFrame, label: str, *, regimes_table: bool
) -> None:
    frame = regimes(priced(estimator, rows), trained)
    frame["source_group"] = source_group(frame["source"])
    print(f"\n1. {label}: error = predicted / measured - 1")
    if regimes_table:
        print("   per source, GPU, dtype, sizes and FLOPs:")
        print_table(frame, ["source_group", "hardware", "dtype", "sizes", "flop_bin"])
    print("\n   per GPU and dtype, every source:")
    print_table(frame, ["hardware", "dtype", "segment"])
    public = frame[frame["source_group"] == "public"]
    print("\n   the public rows per source and implementation:")
    print_table(public.assign(impl=public["impl"].str.slice(0, 34)), ["hardware", "source", "impl", "dtype"])


def section_logo(shipped: pd.DataFrame, rows: pd.DataFrame, sample: int) -> None:
    gemm = shipped[shipped["family"] == "gemm"].reset_index(drop=True)
    print(
        f"\n2. leave-one-GPU-out: the GEMM family trained on {sample:,} sampled shipped GEMM rows without the GPU, "
        f"tested on up to {TEST_ROWS:,} of its Vidur / NeuSight rows per source and on its public rows"
    )
    for gpu in LOGO_GPUS:
        kept = gemm[catalog_names(gemm["hardware"].astype(str)) != gpu]
        fitted = train(
            kept.sample(min(sample, len(kept)), random_state=0).reset_index(drop=True),
            TrainConfig(validate=False, seen_model=False),
        ).estimator
        fitted = uncalibrated(fitted)  # the held-out GPU's public rows are its reference: not used to price it
        held = rows[rows["hardware"] == gpu]
        parts = [
            g.sample(min(TEST_ROWS, len(g)), random_state=0) if not s.startswith("kp:") else g
            for s, g in held.groupby("source")
        ]
        frame = regimes(priced(fitted, pd.concat(parts, ignore_index=True)), kept)
        frame["source_group"] = source_group(frame["source"])
        print(f"   {gpu} held out:")
        print_table(frame, ["source_group", "dtype", "flop_bin"])


def section_reference(estimator: KernelEstimator, rows: pd.DataFrame) -> None:
    print(
        "\n3. public cuBLAS reference rows (`gemm_reference.reference_rows`) per part: median predicted / measured, "
        "the learned price alone and with the reference calibration (the version's own ratio: `maya estimators show` "
        "says where it came from)"
    )
    references = {r.part: r.ratio for r in estimator.gemm_references.references}
    reference = reference_rows(rows)
    raw, calibrated = priced(uncalibrated(estimator), reference), priced(estimator, reference)
    for part, group in reference.groupby("hardware"):
        at = group.index
        print(
            f"   {part:<16}{len(group):>3} rows  learned {np.median(raw.loc[at, 'error'] + 1):.3f}  with the calibration "
            f"{np.median(calibrated.loc[at, 'error'] + 1):.3f}  (the version's reference: "
            f"{f'{references[part]:.3f}' if part in references else 'none'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator-version", default="latest")
    parser.add_argument("--skip-logo", action="store_true", help="Skip section 2 (leave-one-GPU-out).")
    parser.add_argument("--sample", type=int, default=20_000, help="Shipped GEMM rows section 2 trains on.")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    estimator = Registry().load(args.estimator_version)
    shipped = shipped_measurements()
    trained = shipped[shipped["family"] == "gemm"].assign(hardware=lambda f: catalog_names(f["hardware"].astype(str)))
    rows = gemm_rows()
    section_bias(
        uncalibrated(estimator),
        rows,
        trained,
        f"estimator {args.estimator_version}, learned price alone",
        regimes_table=True,
    )
    section_bias(
        estimator,
        rows,
        trained,
        f"estimator {args.estimator_version} with the reference calibration",
        regimes_table=False,
    )
    if not args.skip_logo:
        section_logo(shipped, rows, args.sample)
    section_reference(estimator, rows)


if __name__ == "__main__":
    main()
