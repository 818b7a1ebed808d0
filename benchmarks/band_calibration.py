"""The band's model discrepancy, calibrated across groups of rows: widths set on one suite's (or GPU's) stored
results, coverage judged on the others' (`maya.simulator.discrepancy`).

Reads the latest `maya validate` results of one or more warehouses (`validation_rows`), takes each row's
residual band (the stored band with the discrepancy it was widened with taken out again), and prints, per suite
and GPU: rows, coverage and median width ((high - low) / predicted) of the residual band, then of the band
widened with the widths calibrated on each group (`--split suite` or `gpu`) and judged on the *other* groups
(split conformal, `discrepancy.calibrate`). Nothing is fitted to a point prediction. `--write` stores the widths
calibrated on `--calibrate-on` in `data/band/discrepancy.json` with the check on the others as provenance.

Usage: python benchmarks/band_calibration.py [--warehouse PATH ...] [--split suite|gpu] [--calibrate-on NAME] [--write]
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from maya.estimators.registry import write_atomic
from maya.simulator.discrepancy import Discrepancy, calibrate, narrow, shipped_path, widen
from maya.validation.store import latest


def residual_rows(warehouses: list[Path | None]) -> pd.DataFrame:
    """Predicted rows with a band: suite, gpu, predicted, measured and the residual band (low, high)."""
    frame = pd.concat([latest(w) for w in warehouses], ignore_index=True)
    frame = frame[(frame["status"] == "ok") & frame["band_low_s"].notna() & frame["predicted_s"].notna()]
    if frame.empty:
        raise SystemExit("no predicted suite rows with a band in the warehouse: run `maya validate` first")
    details = frame["details"].map(lambda d: json.loads(d) if isinstance(d, str) and d else {})
    applied = details.map(lambda d: (d.get("band") or {}).get("discrepancy") or d.get("band_discrepancy") or {})
    d_low, d_high = (applied.map(lambda a, k=k: float(a.get(k, 0.0))).to_numpy() for k in ("low", "high"))
    low, high = narrow(frame["predicted_s"], frame["band_low_s"], frame["band_high_s"], d_low, d_high)
    return pd.DataFrame(
        {
            "suite": frame["suite"].to_numpy(),
            "gpu": frame["gpu"].to_numpy(),
            "predicted": frame["predicted_s"].to_numpy(dtype="float64"),
            "measured": frame["measured_s"].to_numpy(dtype="float64"),
            "low": low,
            "high": high,
        }
    )


def coverage_table(rows: pd.DataFrame, low: np.ndarray, high: np.ndarray) -> pd.DataFrame:
    """Per suite and GPU (and `all` per suite): rows, coverage %, median width %, mean signed error %."""
    judged = rows.assign(
        covered=(low <= rows["measured"]) & (rows["measured"] <= high),
        width=(high - low) / rows["predicted"],
        error=rows["predicted"] / rows["measured"] - 1,
    )
    agg = {
        "rows": ("covered", "size"),
        "coverage_pct": ("covered", lambda c: 100 * c.mean()),
        "median_width_pct": ("width", lambda w: 100 * w.median()),
        "mean_error_pct": ("error", lambda e: 100 * e.mean()),
    }
    per_gpu = judged.groupby(["suite", "gpu"]).agg(**agg).reset_index()
    per_suite = judged.groupby("suite").agg(**agg).reset_index().assign(gpu="all")
    return pd.concat([per_gpu, per_suite], ignore_index=True).sort_values(["suite", "gpu"]).round(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, action="append", help="warehouse file, repeatable (default: Maya's)")
    parser.add_argument("--split", choices=("suite", "gpu"), default="suite", help="what a calibration group is")
    parser.add_argument("--calibrate-on", default="neusight", help="group whose rows set the shipped widths")
    parser.add_argument("--write", action="store_true", help="store the widths in data/band/discrepancy.json")
    args = parser.parse_args()
    rows = residual_rows(args.warehouse or [None])
    groups = sorted(rows[args.split].unique())
    if args.write and args.calibrate_on not in groups:
        raise SystemExit(f"no rows of {args.split} {args.calibrate_on!r}; stored: {', '.join(groups)}")
    pd.set_option("display.width", 200)
    print("Residual band (no discrepancy):")
    print(coverage_table(rows, rows["low"].to_numpy(), rows["high"].to_numpy()).to_string(index=False), "\n")
    widths = {}
    for group in groups:
        mine = rows[rows[args.split] == group]
        widths[group] = calibrate(mine["predicted"], mine["low"], mine["high"], mine["measured"])
        print(f"calibrated on {group} ({len(mine)} rows): d_low {widths[group][0]:.3f}, d_high {widths[group][1]:.3f}")
    for group in groups:
        others = rows[rows[args.split] != group]
        if others.empty:
            continue
        low, high = widen(others["predicted"], others["low"], others["high"], *widths[group])
        print(f"\nWidths calibrated on {group}, judged on the other rows:")
        print(coverage_table(others, low, high).to_string(index=False))
    if args.write:
        chosen = widths[args.calibrate_on]
        others = rows[rows[args.split] != args.calibrate_on]
        checked = {}
        if not others.empty:
            low, high = widen(others["predicted"], others["low"], others["high"], *chosen)
            table = coverage_table(others, low, high)
            checked = {
                f"{r.suite}/{r.gpu}": [int(r.rows), r.coverage_pct, r.median_width_pct] for r in table.itertuples()
            }
        provenance = {
            "calibrated_on": f"{args.split} {args.calibrate_on}",
            "rows": int((rows[args.split] == args.calibrate_on).sum()),
            "method": "split conformal, 10% per side, widths added in quadrature to the residual band",
            "checked_on": "[rows, coverage %, median width %] per suite/gpu",
            "checked": checked,
            "written": datetime.now(UTC).strftime("%Y-%m-%d"),
        }
        out = Discrepancy(round(chosen[0], 4), round(chosen[1], 4), provenance)
        write_atomic(shipped_path(), (json.dumps(out.to_json(), indent=1, sort_keys=True) + "\n").encode())
        print(f"\nwrote {shipped_path()}")


if __name__ == "__main__":
    main()
