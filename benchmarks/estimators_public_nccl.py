"""NCCL collective model accuracy on Vidur's measured collectives: in-sample, and leave-one-network-out
(fit without a network, predict it from its cluster spec and what the others taught).

Target (issue 17): MAPE <= 10% per held-out network where a network of the same node topology stays in
training: the pairwise-NVLink nodes among themselves. a100_dgx is the only NVSwitch node and the only one
with multi-node all-reduce, so holding it out is pure extrapolation: reported, not judged. The measured
machines' inter-node networks are not described: a held-out network's multi-node rows are priced on the
mean of the others' learned networks, and the tables split intra- from inter-node rows.
Curves that copy another network's measurements value for value are left out (named in the output).

`nccl_report(dataset_path)` returns the figures as a DataFrame (one row per split, held-out network,
collective, ranks, GPUs per node and size band, plus `all` rows per network and per network and scope).
Usage: python benchmarks/estimators_public_nccl.py [--dataset PATH] [--no-lono]
(before data/vidur/ ships: --dataset /work/shared/datasets/vidur/collectives.parquet)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from maya.estimators.collective_data import load_collectives, shipped_dataset, size_regime
from maya.estimators.collective_fit import fit, predict

TARGET = 0.10
PAIRWISE = ("a100_pairwise_nvlink", "h100_pairwise_nvlink", "a40_pairwise_nvlink")
"""Networks of one node topology (NVLink between pairs): judged against the target when held out."""
KEYS = ["split", "network", "collective", "ranks", "per_node", "regime"]


def nccl_report(dataset_path: str | Path | None = None, *, lono: bool = True) -> pd.DataFrame:
    """MAPE (fraction) and rows per split (`in-sample`, `held-out`), network, collective, ranks, GPUs per
    node and size band; `all` in a key column aggregates over it (`scope` tells intra- from inter-node)."""
    frame = load_collectives(dataset_path or shipped_dataset())
    frame = frame[frame["duplicate_of"].isna()].reset_index(drop=True)
    frame["regime"] = size_regime(frame["bytes"])
    frame["scope"] = np.where(frame["nodes"] > 1, "inter-node", "intra-node")
    parts = [frame.assign(split="in-sample", predicted_us=predict(frame, fit(frame).params))]
    if lono:
        for network in sorted(frame["network"].unique()):
            held = frame[frame["network"] == network]
            params = fit(frame, exclude=[network]).params
            parts.append(held.assign(split="held-out", predicted_us=predict(held, params)))
    rows = pd.concat(parts, ignore_index=True)
    rows["ape"] = (rows["predicted_us"] / rows["measured_us"] - 1).abs()
    detail = rows.groupby(KEYS, sort=True).agg(rows=("ape", "size"), mape=("ape", "mean")).reset_index()
    detail["scope"] = np.where(detail["per_node"] < detail["ranks"], "inter-node", "intra-node")
    summaries = []
    for by in (["split", "network"], ["split", "network", "scope"], ["split", "network", "regime"]):
        part = rows.groupby(by, sort=True).agg(rows=("ape", "size"), mape=("ape", "mean")).reset_index()
        summaries.append(part.assign(**{k: "all" for k in [*KEYS, "scope"] if k not in by}))
    return pd.concat([detail, *summaries], ignore_index=True)[[*KEYS, "scope", "rows", "mape"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        default=shipped_dataset(),
        help="Vidur collectives Parquet (default: the shipped data/vidur/collectives.parquet)",
    )
    parser.add_argument("--no-lono", action="store_true", help="in-sample only (one fit instead of five)")
    args = parser.parse_args()
    copies = load_collectives(args.dataset)
    copies = copies[copies["duplicate_of"].notna()]
    for (network, collective, of), rows in copies.groupby(["network", "collective", "duplicate_of"]).groups.items():
        print(f"left out: {network} {collective} ({len(rows)} rows, a value-for-value copy of {of})")
    started = time.perf_counter()
    report = nccl_report(args.dataset, lono=not args.no_lono)
    print(f"fitted and evaluated in {time.perf_counter() - started:.0f} s\n")
    pd.set_option("display.width", 200)
    table = report.assign(mape=(100 * report["mape"]).round(1))
    overall = table[(table["collective"] == "all") & (table["regime"] == "all")]
    print("MAPE % per network (all rows, then intra- and inter-node rows):")
    print(overall.pivot_table(index="network", columns=["split", "scope"], values="mape").to_string(), "\n")
    print("MAPE % per network and size band:")
    bands = table[(table["collective"] == "all") & (table["regime"] != "all")]
    print(bands.pivot_table(index=["split", "network"], columns="regime", values="mape").to_string(), "\n")
    print("MAPE % per network, collective, ranks (GPUs per node) and size band:")
    detail = table[(table["collective"] != "all")]
    print(
        detail.pivot_table(
            index=["split", "network", "collective", "ranks", "per_node"], columns="regime", values="mape"
        ).to_string(),
        "\n",
    )
    held = overall[overall["split"] == "held-out"].set_index(["network", "scope"])["mape"]
    for network in PAIRWISE:
        if (network, "all") in held:
            verdict = "meets" if held[network, "all"] <= 100 * TARGET else "misses"
            intra = held.get((network, "intra-node"), float("nan"))
            print(
                f"held-out {network}: {held[network, 'all']:.1f}% ({verdict} the {100 * TARGET:.0f}% target); "
                f"its intra-node rows (the node its cluster spec describes) {intra:.1f}%"
            )


if __name__ == "__main__":
    main()
