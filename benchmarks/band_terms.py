"""What makes a prediction's 10-90% band wide: each error term's width alone, per suite row.

Re-predicts stored `maya validate` rows from their captured traces (the warehouse's `validation_rows` and the
capture cache under `MAYA_HOME/validation/traces`) and, for each, prints the band's width ((high - low) /
predicted) with one term varied at a time through the band's own linear model (`maya.simulator.band`: a
group's share of the iteration times its calls' 10th and 90th percentile factors): each kernel family
(composed fused attention apart, split into its model's held-out residuals and the proxy's widening,
`attention_model.PROXY_UNCERTAINTY`) and each collective scope; then the band as `maya predict` reports it
(with the calibrated model discrepancy, `maya.simulator.discrepancy`, which is not varied here as a term).
Nothing is fitted; the terms are independent draws, so their widths add roughly in quadrature, not linearly.

Usage: python benchmarks/band_terms.py --rows 0,12,27 [--warehouse PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from maya.estimators.attention_model import PROXY_UNCERTAINTY
from maya.simulator import band as band_module
from maya.simulator.band import Z90, log_factor
from maya.simulator.opcodes import COLL, DEVICE_OPS
from maya.validation.runner import traces_dir
from maya.validation.store import latest


def term_widths(sim, prediction) -> dict[str, float]:
    """Per error term, the iteration band's width (fraction of the prediction) with that term alone varied."""
    grouped = band_module.call_groups(sim)
    if grouped is None:
        return {}
    names, per_program = grouped
    critical = next(i for i, r in enumerate(sim.replicas) if r.rank == prediction.critical_rank)
    replica = sim.replicas[critical]
    program = replica.program
    groups = per_program[program.rank]
    device = sim.devices[critical].astype("float64") * band_module._steady_calls(sim, program.rank, program.n)
    frame = program.frame
    ops = frame["opcode"].to_numpy()
    kernel = frame["op"].astype(str).str.split("_").str[0].to_numpy()
    proxy = np.log1p(np.array([PROXY_UNCERTAINTY.get(k, 0.0) for k in kernel]))
    compute, comm = np.isin(ops, DEVICE_OPS) & (ops != COLL), ops == COLL
    total = prediction.iteration_ns
    out: dict[str, float] = {}

    def width(calls: np.ndarray, part: float, weight: float, quantiles: np.ndarray) -> float:
        if not calls.any() or not weight:
            return 0.0
        z = np.array([-Z90, Z90])[:, None]
        factors = np.exp(log_factor(quantiles[calls][None, :, :], z))
        return float(part * (factors[1] - factors[0]) @ device[calls] / weight / total)

    for calls, part in ((compute, prediction.compute_ns), (comm, prediction.exposed_comm_ns)):
        weight = device[calls].sum()
        for g in np.unique(groups.group[calls]):
            if g < 0:
                continue
            mine = calls & (groups.group == g)
            plain = mine & ~groups.composed
            label = names[g]
            out[label] = width(plain, part, weight, groups.quantiles)
            composed = mine & groups.composed
            if composed.any():
                inner = groups.quantiles.copy()
                inner[:, 0] = np.minimum(inner[:, 0] + proxy, 0.0)
                inner[:, 2] = np.maximum(inner[:, 2] - proxy, 0.0)
                out["kernels: fused attention (its model's residuals)"] = width(composed, part, weight, inner)
                out["kernels: fused attention (with the proxy's widening)"] = width(
                    composed, part, weight, groups.quantiles
                )
    return out


def main() -> None:
    from maya.api import PredictOptions
    from maya.api import predict as predict_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", required=True, help="comma-separated row numbers")
    parser.add_argument("--suite", default="llm-foundry")
    parser.add_argument("--warehouse", type=Path)
    parser.add_argument("--json", type=Path, help="also write the terms per row here")
    args = parser.parse_args()
    stored = latest(args.warehouse)
    stored = stored[(stored["suite"] == args.suite) & (stored["status"] == "ok")].set_index("row")
    captured: dict = {}
    original = band_module.iteration_band

    def spy(sim, prediction, **kw):
        captured["terms"] = term_widths(sim, prediction)
        return original(sim, prediction, **kw)

    band_module.iteration_band = spy
    results = {}
    for row in (int(r) for r in args.rows.split(",")):
        r = stored.loc[row]
        options = PredictOptions(
            hardware=r["hardware"],
            cluster=r["cluster"],
            durations="estimators",
            estimator_version=r["estimator_version"],
            warehouse=args.warehouse,
            band=True,
        )
        p = predict_run(traces_dir() / r["command_hash"], options)
        terms = captured.pop("terms", {})
        band = p.band or {}
        terms["band (as predicted)"] = (band["high_ns"] - band["low_ns"]) / p.iteration_ns if band else float("nan")
        error = r["measured_s"] / (p.iteration_ns / 1e9) - 1
        results[row] = {"gpu": r["gpu"], "seq": r["seq"], "error_pct": 100 * error, **terms}
        print(f"row {row} {r['label']}: measured/predicted - 1 = {100 * error:+.1f}%", flush=True)
        for name, value in sorted(terms.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<55} {100 * value:6.1f}%")
    table = pd.DataFrame(results).T
    terms = [c for c in table.columns if c not in ("gpu", "seq", "error_pct")]
    table[terms] = (100 * table[terms].astype("float64")).round(1)
    table["error_pct"] = table["error_pct"].astype("float64").round(1)
    pd.set_option("display.width", 250)
    print("\nwidth, % of the prediction, per term alone:")
    print(table.to_string())
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
