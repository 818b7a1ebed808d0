"""The band's calibrated width, judged on whole suites and GPUs left out.

The widths are `maya.simulator.discrepancy`'s.

Reads predicted suite rows: the latest `maya validate` results of one or more warehouses (`validation_rows`), as
stored or, with `--repredict`, re-predicted from their cached traces (`$MAYA_HOME/validation/traces/<command hash>`
beside the warehouse) with this checkout's code (`maya.api.replay`, as `maya validate` predicts them); and
`maya predict --json` files of a suite's rows (`--predicted SUITE=DIR`: every `<row label>.json` in DIR, its
measured time from the suite's own table). Per row it takes the prediction, the measured time, the residual band
(the replays'), the a-priori widths of proxy-priced kernels and the prediction's own properties that
`band_by_property.py` reads (`PROPERTY_COLUMNS`), and prints per suite and per suite/GPU (rows, coverage, median
width (high - low) / predicted, mean signed and mean |error|, error = predicted / measured - 1):

- the band as stored (as each row was predicted);
- leave one suite out: widths calibrated (split conformal, 10% a side) on the other suites, judged on it: the
  honest figure;
- leave one GPU out: widths calibrated on the other GPUs' rows of every suite, judged on that GPU;
- in sample: widths calibrated on every row, judged on the same rows (not a check).

Nothing is fitted to a point prediction. `--write` stores the widths calibrated on every row in
`data/band/discrepancy.json`, with the suites, rows, date, code version and the leave-one-suite-out figures as
provenance, and the rows themselves in `data/band/calibration_rows.csv`; with no input named, the script reads
that file, so the shipped widths are re-derived from the repository alone.

Usage: python benchmarks/band_calibration.py [--warehouse PATH ...] [--repredict] [--predicted SUITE=DIR ...]
       [--rows SUITE=QUERY ...] [--rows-file CSV] [--residual-scale S] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.paths import write_atomic
from maya.estimators.attention_model import PROXY_UNCERTAINTY
from maya.simulator.discrepancy import Discrepancy, apriori_widths, band, base_widths, calibrate, shipped_path
from maya.validation import load_suite
from maya.validation.plan import BAND_DETAILS, row_options
from maya.validation.runner import traces_dir
from maya.validation.store import latest
from maya_trace_spec import Run

ROWS_FILE = Path("calibration_rows.csv")
"""Beside the shipped widths: the rows they were calibrated on, so `band_calibration.py` alone re-derives them."""
COLUMNS = ("suite", "gpu", "row", "predicted", "measured", "low", "high", "residual_low", "residual_high")


def _residual(band: dict, low: float, high: float) -> tuple[float, float]:
    """The replays' band of a stored row: stored beside the band since the band is calibrated; before, the band
    itself where no discrepancy was applied (NaN otherwise)."""
    if band.get("residual_low_ns") is not None:
        return band["residual_low_ns"] / 1e9, band["residual_high_ns"] / 1e9
    if band.get("residual_ms") is not None:  # NeuSight's rows: the replays' forward + backward windows
        return band["residual_ms"][0] / 1e3, band["residual_ms"][1] / 1e3
    applied = band.get("discrepancy") or {}
    if applied.get("low", 0.0) == 0.0 and applied.get("high", 0.0) == 0.0 and applied.get("residual_scale", 1.0) == 1:
        return low, high
    return float("nan"), float("nan")


def _apriori(suite: str, row: int, band: dict) -> tuple[float, float]:
    """The a-priori widths a row was predicted with; for llm-foundry rows stored before they were recorded, its
    composed (attention) share where the row ran llm-foundry's Triton kernel (`mpt_rows.stack_settings`: every
    composed call of such a row is that kernel)."""
    if "apriori" in band:
        return tuple(band["apriori"])
    if suite != "llm-foundry":
        return 0.0, 0.0
    from maya.data.workloads.mpt_rows import stack_settings

    values = _suite_table("llm-foundry").loc[row]
    triton = stack_settings(values.astype(str).to_dict())["attn_impl"] == "triton"
    return apriori_widths({PROXY_UNCERTAINTY["lftriton"]: band.get("composed_share", 0.0)} if triton else {})


_TABLES: dict[str, pd.DataFrame] = {}


def _suite_table(name: str) -> pd.DataFrame:
    if name not in _TABLES:
        _TABLES[name] = load_suite(name).table
    return _TABLES[name]


PROPERTY_COLUMNS = ("gpus", "nodes", "exposed_comm_share", "inter_node_share")
"""A prediction's own properties a row keeps (NaN where its input lacks one): its GPUs, the nodes they span (the
trace's GPUs per node, as the simulator places ranks), the share of the step in exposed communication and the
band's share of the step in inter-node collectives."""


def properties(details: dict, predicted_s: float, gpus: int, run_dir: Path | None) -> dict:
    """`PROPERTY_COLUMNS` of a prediction from its stored `details` (`breakdown_s`, `band.shares`, as
    `maya.validation.plan.predict_plan` keeps them) and its trace's run directory (None or missing: nodes NaN)."""
    breakdown = details.get("breakdown_s") or {}
    shares = (details.get("band") or {}).get("shares")
    nodes = float("nan")
    if run_dir is not None and (run_dir / "run.parquet").is_file():
        info = Run(run_dir).info
        per_node = info.get("nproc_per_node")
        nodes = -(-gpus // per_node) if per_node else (info.get("nnodes") or 1)
    return {
        "gpus": gpus,
        "nodes": nodes,
        "exposed_comm_share": breakdown["exposed_comm"] / predicted_s if "exposed_comm" in breakdown else math.nan,
        "inter_node_share": shares.get("collectives: inter-node", 0.0) if shares is not None else math.nan,
    }


def _row(r, details: dict, predicted: float, low: float, high: float, run_dir: Path | None, source: str) -> dict:
    """One calibration row of a stored result `r` (a `latest` row) predicted as `predicted` (`low`, `high`)."""
    stored = details.get("band") or {
        "discrepancy": details.get("band_discrepancy") or {},
        "residual_ms": details.get("band_residual_ms"),
    }
    r_low, r_high = _residual(stored, low, high)
    a_low, a_high = _apriori(r.suite, int(r.row), stored)
    values = (r.suite, r.gpu, int(r.row), predicted, r.measured_s, low, high, r_low, r_high)
    return (
        dict(zip(COLUMNS, values))
        | {"apriori_low": a_low, "apriori_high": a_high, "source": source}
        | properties(details, predicted, int(r.gpus), run_dir)
    )


def _stored(warehouse: Path | None) -> pd.DataFrame:
    """A warehouse's latest suite results that were predicted with a band."""
    frame = latest(warehouse)
    return frame[(frame["status"] == "ok") & frame["band_low_s"].notna() & frame["predicted_s"].notna()]


def _traces(warehouse: Path | None) -> Path:
    """The cached traces of a warehouse's suite rows: `maya validate` keeps them in the same MAYA_HOME."""
    return (warehouse.parent / "validation" / "traces") if warehouse else traces_dir()


def warehouse_rows(warehouse: Path | None) -> list[dict]:
    """Predicted rows with a band of a warehouse's latest suite results, as stored."""
    out = []
    for r in _stored(warehouse).itertuples():
        details = json.loads(r.details) if isinstance(r.details, str) and r.details else {}
        run_dir = _traces(warehouse) / r.command_hash if isinstance(r.command_hash, str) else None
        row = _row(r, details, r.predicted_s, r.band_low_s, r.band_high_s, run_dir, str(warehouse))
        out.append(row | {"recorded": r.recorded_at})
    return out


def repredicted_rows(warehouse: Path | None, rows: list[str]) -> list[dict]:
    """A warehouse's latest suite results (those `rows` selects, `--rows` queries) re-predicted from their cached
    traces with this code, with the options `maya validate` predicted them with (`predict_plan`: the row's hardware,
    cluster and estimator version, with a band); measured times as stored. NeuSight's rows (windows of the replay,
    not its iteration) and rows whose trace is gone are named and read as stored."""
    from maya.api import predict

    stored = _stored(warehouse).rename(columns={"predicted_s": "predicted", "measured_s": "measured"})
    stored = select(stored.reset_index(drop=True), rows, strict=False)
    out, now = [], datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    as_stored = {(x["suite"], x["row"]): x for x in warehouse_rows(warehouse)}
    source = f"re-predicted from {warehouse or 'MAYA_HOME'}'s cached traces (band_calibration.py --repredict)"
    for r in stored.rename(columns={"predicted": "predicted_s", "measured": "measured_s"}).itertuples():
        run_dir = _traces(warehouse) / r.command_hash if isinstance(r.command_hash, str) else None
        if r.kind == "neusight" or run_dir is None or not run_dir.is_dir():
            print(f"{r.suite} row {r.row}: {'not a step' if r.kind == 'neusight' else 'no cached trace'}: as stored")
            out.append(as_stored[(r.suite, int(r.row))])
            continue
        p = predict(run_dir, row_options(r.hardware, r.cluster, r.estimator_version, warehouse))
        band_ = p.band or {}
        details = {"breakdown_s": {k: v / 1e3 for k, v in p.to_dict(per_rank=False)["breakdown_ms"].items()}}
        details["band"] = {k: v for k, v in band_.items() if k in BAND_DETAILS}
        predicted, low, high = p.iteration_ns / 1e9, band_["low_ns"] / 1e9, band_["high_ns"] / 1e9
        out.append(_row(r, details, predicted, low, high, run_dir, source) | {"recorded": now})
        print(f"{r.suite} row {r.row}: {100 * (predicted / r.measured_s - 1):+.1f}% (stored {r.predicted_s:.4g} s)")
    return out


def predicted_rows(spec: str) -> list[dict]:
    """`SUITE=DIR`: the `maya predict --json` files in DIR named by their row's label, measured from the suite."""
    from maya.validation import modded_nanogpt

    suite_name, _, folder = spec.partition("=")
    if not folder or not Path(folder).is_dir():
        raise SystemExit(f"--predicted {spec!r}: expected SUITE=DIR with DIR a folder of `maya predict --json` files")
    suite = load_suite(suite_name)
    if suite.kind != "modded-nanogpt":
        raise SystemExit(
            f"--predicted {spec!r}: only modded-nanogpt suites (rows labelled by record) are read from files"
        )
    table = suite.table
    labels = {str(v["record"]): i for i, v in table.iterrows()}
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        if path.stem not in labels:
            raise SystemExit(f"{path}: no row labelled {path.stem!r} in suite {suite_name} ({', '.join(labels)})")
        row = labels[path.stem]
        p = json.loads(path.read_text())
        b = p.get("band") or {}
        if not b:
            raise SystemExit(f"{path}: the prediction has no band")
        predicted, low, high = p["iteration_ns"] / 1e9, b["low_ns"] / 1e9, b["high_ns"] / 1e9
        r_low, r_high = _residual(b, low, high)
        a_low, a_high = b.get("apriori", (0.0, 0.0))
        measured = modded_nanogpt.measured_s(table.loc[row])
        values = (suite_name, "h100_80gb", int(row), predicted, measured, low, high, r_low, r_high)
        recorded = pd.Timestamp(path.stat().st_mtime, unit="s")
        details = {"breakdown_s": {k: v / 1e3 for k, v in p["breakdown_ms"].items()}, "band": b}
        out.append(
            dict(zip(COLUMNS, values))
            | {"apriori_low": a_low, "apriori_high": a_high, "source": str(path), "recorded": recorded}
            | properties(details, predicted, int(p["world_size"]), Path(p["run_path"]))
        )
    return out


def select(rows: pd.DataFrame, specs: list[str], strict: bool = True) -> pd.DataFrame:
    """The rows each `SUITE=QUERY` of `specs` keeps of its suite (a pandas query over row, gpu, predicted,
    measured); `strict`: a suite absent from `rows` is an error."""
    for spec in specs:
        suite, _, query = spec.partition("=")
        if not query or (strict and suite not in set(rows["suite"])):
            raise SystemExit(
                f"--rows {spec!r}: expected SUITE=QUERY with SUITE one of {', '.join(sorted(set(rows['suite'])))}"
            )
        keep = rows.index.isin(rows[rows["suite"] == suite].query(query).index)
        rows = rows[(rows["suite"] != suite) | keep].reset_index(drop=True)
    return rows


SCALES = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Residual scales `--residual-scale auto` chooses from."""


def widths_for(rows: pd.DataFrame, scale: float | None) -> tuple[float, float, float]:
    """(d_low, d_high, residual scale) calibrated on `rows`.

    Scale None: of `SCALES`, the one whose calibrated band is narrowest (median width) on these same rows, each
    scale's widths covering them alike."""
    if scale is None:
        return min((widths_for(rows, s) for s in SCALES), key=lambda w: _median_width(rows, w))
    below, above = base_widths(
        rows["predicted"], rows["residual_low"], rows["residual_high"], rows["apriori_low"], rows["apriori_high"], scale
    )
    return (*calibrate(rows["predicted"], rows["measured"], below, above), scale)


def _median_width(rows: pd.DataFrame, widths: tuple[float, float, float]) -> float:
    low, high = band_of(rows, widths)
    return float(np.median((high - low) / rows["predicted"]))


def band_of(rows: pd.DataFrame, widths: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    return band(
        rows["predicted"],
        rows["residual_low"],
        rows["residual_high"],
        rows["apriori_low"],
        rows["apriori_high"],
        *widths,
    )


def table(rows: pd.DataFrame, low, high, by: str | list[str] = "suite") -> pd.DataFrame:
    """The band (`low`, `high` per row) judged per `by`: a column or list of columns ("suite": per suite/GPU too).

    Columns: rows, coverage %, % of rows measured below and above the band, median width %, mean signed and mean
    |error| %."""
    judged = rows.assign(
        covered=(np.asarray(low) <= rows["measured"]) & (rows["measured"] <= np.asarray(high)),
        below=rows["measured"] < np.asarray(low),
        above=rows["measured"] > np.asarray(high),
        width=(np.asarray(high) - np.asarray(low)) / rows["predicted"],
        error=rows["predicted"] / rows["measured"] - 1,
    )
    agg = {
        "rows": ("covered", "size"),
        "coverage_pct": ("covered", lambda c: 100 * c.mean()),
        "below_pct": ("below", lambda c: 100 * c.mean()),
        "above_pct": ("above", lambda c: 100 * c.mean()),
        "median_width_pct": ("width", lambda w: 100 * w.median()),
        "signed_pct": ("error", lambda e: 100 * e.mean()),
        "abs_pct": ("error", lambda e: 100 * e.abs().mean()),
    }
    if by != "suite":
        return judged.groupby(by).agg(**agg).reset_index().round(1)
    per_gpu = judged.groupby(["suite", "gpu"]).agg(**agg).reset_index()
    per_suite = judged.groupby("suite").agg(**agg).reset_index().assign(gpu="all")
    return pd.concat([per_gpu, per_suite], ignore_index=True).sort_values(["suite", "gpu"]).round(1)


def left_out(rows: pd.DataFrame, key: str, scale: float | None) -> tuple[pd.DataFrame, dict]:
    """Each group of `key` (suite or gpu) judged with widths calibrated on the rows of the other groups."""
    low, high = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    widths = {}
    for group in sorted(rows[key].unique()):
        mine = (rows[key] == group).to_numpy()
        if mine.all():
            raise SystemExit(f"only one {key} ({group}): nothing to calibrate on when it is left out")
        widths[group] = widths_for(rows[~mine], scale)
        low[mine], high[mine] = band_of(rows[mine], widths[group])
    return table(rows, low, high, key), widths


def shipped_widths(widths: tuple[float, float, float]) -> tuple[float, float, float]:
    """The widths as shipped: each rounded outward to 4 decimals, so the rows they were calibrated on stay covered."""
    return math.ceil(widths[0] * 1e4) / 1e4, math.ceil(widths[1] * 1e4) / 1e4, widths[2]


def measured_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a measurement to calibrate on (a finite, positive `measured` time), saying how many had none."""
    keep = np.isfinite(rows["measured"].to_numpy(dtype="float64")) & (rows["measured"] > 0).to_numpy()
    if not keep.all():
        print(f"{(~keep).sum()} of {len(rows)} rows have no measurement (NaN or <= 0 `measured`): left out")
    return rows[keep].reset_index(drop=True)


def _judged(r) -> list:
    """A left-out table row as stored in the provenance (`left_out_columns`)."""
    return [int(r.rows), r.coverage_pct, r.median_width_pct, r.below_pct, r.above_pct]


def _rounded(widths: dict) -> str:
    return ", ".join(f"{k} -{v[0]:.3f}/+{v[1]:.3f} (residuals x {v[2]:g})" for k, v in widths.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, action="append", default=[], help="warehouse file, repeatable")
    parser.add_argument(
        "--repredict",
        action="store_true",
        help="re-predict the --warehouse rows (those --rows selects) from their cached traces with this code",
    )
    parser.add_argument("--predicted", action="append", default=[], help="SUITE=DIR of `maya predict --json` files")
    parser.add_argument(
        "--rows",
        action="append",
        default=[],
        help="SUITE=QUERY: only that suite's rows matching "
        "the pandas query over row, gpu, predicted, measured (e.g. 'llm-foundry=row %% 3 == 0')",
    )
    parser.add_argument(
        "--rows-file",
        type=Path,
        help=f"rows a --write stored (read by default when no --warehouse or --predicted is given: {ROWS_FILE})",
    )
    parser.add_argument(
        "--residual-scale",
        default="auto",
        help="factor on the residual band (0: none), or auto: per calibration, the scale of "
        f"{', '.join(map(str, SCALES))} whose band is narrowest on the calibration rows",
    )
    parser.add_argument("--write", action="store_true", help="store the widths in data/band/discrepancy.json")
    args = parser.parse_args()
    if args.repredict and not args.warehouse:
        raise SystemExit("--repredict re-predicts the rows of the --warehouse files: name one or more")
    stored = (lambda w: repredicted_rows(w, args.rows)) if args.repredict else warehouse_rows
    found = [r for w in args.warehouse for r in stored(w)]
    found += [r for spec in args.predicted for r in predicted_rows(spec)]
    if args.rows_file or not found:
        path = args.rows_file or shipped_path().parent / ROWS_FILE.name
        found += pd.read_csv(path, parse_dates=["recorded"]).to_dict("records")
    rows = pd.DataFrame(found).sort_values("recorded").drop_duplicates(["suite", "row"], keep="last")
    rows = measured_rows(rows.sort_values(["suite", "row"]).reset_index(drop=True))  # each row's latest result
    rows = select(rows, args.rows)
    if rows["suite"].nunique() < 2:
        raise SystemExit(f"rows of {rows['suite'].nunique()} suite(s): calibration across suites needs two or more")
    scale = None if args.residual_scale == "auto" else float(args.residual_scale)
    if scale != 0 and rows[["residual_low", "residual_high"]].isna().any().any():
        raise SystemExit("some rows have no residual band stored: --residual-scale needs it")
    pd.set_option("display.width", 200)
    print("The band as stored (as each row was predicted):")
    print(table(rows, rows["low"], rows["high"]).to_string(index=False))
    loso, loso_widths = left_out(rows, "suite", scale)
    print(f"\nLeave one suite out; log widths from the other suites: {_rounded(loso_widths)}")
    print(loso.to_string(index=False))
    logo, logo_widths = left_out(rows, "gpu", scale)
    print(f"\nLeave one GPU out; log widths from the other GPUs' rows: {_rounded(logo_widths)}")
    print(logo.to_string(index=False))
    widths = shipped_widths(widths_for(rows, scale))
    print(f"\nIn sample: widths from every row, as shipped, {_rounded({'all': widths})} (not a check)")
    print(table(rows, *band_of(rows, widths)).to_string(index=False))
    if args.write:
        suites = sorted(rows["suite"].unique())
        provenance = {
            "calibrated_on": "suites " + ", ".join(suites),
            "rows": len(rows),
            "rows_by_suite": {s: sorted(int(r) for r in rows.loc[rows["suite"] == s, "row"]) for s in suites},
            "sources": sorted(set(rows["source"])),
            "method": "split conformal, 10% a side, added in quadrature to the larger of the residual band x "
            "residual_scale and the a-priori proxy widths; point predictions untouched",
            "residual_scale_chosen": "given" if scale is not None else f"narrowest on the calibration rows of {SCALES}",
            "left_out": {f"{r.suite}/{r.gpu}": _judged(r) for r in loso.itertuples()},
            "left_out_gpu": {r.gpu: _judged(r) for r in logo.itertuples()},
            "left_out_columns": "[rows, coverage %, median width %, % measured below the band, % above]: per "
            "suite/gpu with widths from the other suites; per gpu with widths from the other GPUs",
            "maya": version("maya"),
            "written": datetime.now(UTC).strftime("%Y-%m-%d"),
        }
        out = Discrepancy(*widths, provenance)
        rows_path = shipped_path().parent / ROWS_FILE.name
        write_atomic(rows_path, rows.to_csv(index=False, float_format="%.9g").encode())
        write_atomic(shipped_path(), (json.dumps(out.to_json(), indent=1, sort_keys=True) + "\n").encode())
        print(f"\nwrote {shipped_path()} and {rows_path}")


if __name__ == "__main__":
    main()
