"""Fit `CollectiveParams` to measured NCCL times (`maya.estimators.collective_data`).

The model of `maya.estimators.collectives` prices every measured row on its machine's cluster spec. What is
learned is what spec sheets and NCCL's design leave open: the share of each link's line rate NCCL reaches,
the LL / LL128 bandwidth ratios, the send/recv gain and each undescribed inter-node network. The latencies
inside a node are NCCL's own tuning model (`NCCL_LATENCY`), not fitted: the measured small-message times carry
10-60 us of host-side skew that differs by machine, and latencies fitted to it moved with every change of the
data and priced a held-out machine with another's skew. The parameters minimise a robust loss (soft L1, scale
0.1) of the rows' errors, first of log(predicted / measured) (well behaved far from the answer), then of the
relative error MAPE counts, from where the first ended. Errors up to ~10% count as squared, larger ones
linearly, so the small-message rows that include waiting for a late peer do not steer the fit. Each
undescribed network gets its own bandwidth per GPU and hop latency; the cap per node is a shared multiple of
the bandwidth per GPU. The fit is deterministic.

    python -m maya.estimators.collective_fit [--dataset collectives.parquet] [--out data/collectives/nccl.json]
        [--measured-out data/collectives/measured.json]

writes the fit and, from the same dataset, the measured machines' curves (`collective_measured`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from maya.core.clusters import ClusterSpec, MeasuredMachine, cluster_file, load_cluster, parse_cluster
from maya.core.paths import write_atomic

from .collective_data import GROUP, VIDUR_CLUSTERS, load_collectives, shipped_dataset
from .collective_measured import KNOTS_PER_OCTAVE, LARGE_OCTAVES, MeasuredCollectives, build
from .collective_measured import shipped_path as measured_path
from .collective_params import FALLBACK, LINKS, CollectiveParams, LinkParams, NetworkParams, shipped_path
from .collectives import CollectiveModel

SCALE = 0.1
"""Relative error where the loss turns from squared to linear."""
NCCL_LATENCY = {
    "base_us.LL": 6.6,
    "base_us.LL128": 14.0,
    "base_us.simple": 8.4,
    "hop_ratio.LL": 0.6 / 3.4,
    "hop_ratio.LL128": 1.9 / 3.4,
    "nvlink.hop_us": 3.4,
    "nvswitch.hop_us": 3.4,
    "pcie.hop_us": 5.7,
    "shm.hop_us": 5.7,
    "nvls_us": 25.0,
}
"""Fixed latencies of NCCL's tuning model (`src/graph/tuning.cc`, ring rows): `baseLat` per protocol, `hwLat`
per hop (NVLink, through NVSwitch too: 0.6 / 1.9 / 3.4 us for LL / LL128 / Simple; PCIe, and host memory,
which NCCL prices as PCI: Simple 5.7 us), the LL and LL128 hops as NVLink's ratios to Simple; NVLS inside a
node: `hwLat` 25 us and no base."""
LINK_START = {"efficiency": 0.7}
START = {"bandwidth_ratio.LL": 0.4, "bandwidth_ratio.LL128": 0.9, "p2p_gain": 1.0, "node_ratio": 4.0}
"""Starting point: LL's 50% and LL128's ~94% payload, a neutral efficiency and send/recv gain."""
NETWORK_START = {"gpu_gbs": 5.0, "hop_us": 14.0}
UNCAPPED = 8.0
"""Node cap of the networks, in GPUs' worth, when no measurement spans nodes with several GPUs each: none
below 8 GPUs per node."""
BOUNDS = {
    "efficiency": (0.05, 1.0),
    "bandwidth_ratio.LL": (0.05, 0.5),
    "bandwidth_ratio.LL128": (0.05, 120 / 128),
    "p2p_gain": (0.3, 3.0),
    "node_ratio": (1.0, 64.0),
}
"""Mechanism limits: no link beyond its line rate; LL carries 4 bytes of data per 8, LL128 120 per 128."""


@dataclass(frozen=True)
class FitResult:
    params: CollectiveParams
    rows: int
    cost: float


def fit(frame: pd.DataFrame, *, exclude: Sequence[str] = ()) -> FitResult:
    """Parameters fitted on the rows of `frame` (from `load_collectives`) outside the networks `exclude`;
    curves that copy another network's are left out."""
    train = frame[~frame["network"].isin(exclude) & frame["duplicate_of"].isna()]
    if train.empty:
        raise ValueError("no measured collectives left to fit on")
    networks = sorted(train.loc[train["nodes"] > 1, "network"].unique())
    capped = ((train["nodes"] > 1) & (train["per_node"] > 1) & (train["collective"] != "sendrecv")).any()
    curves = _curves(train)
    links = sorted(set().union(*(_links(c) for c in curves)))
    names = [
        *(f"{link}.{k}" for link in links for k in LINK_START),
        *(k for k in START if capped or k != "node_ratio"),
        *(f"net.{n}.{k}" for n in networks for k in NETWORK_START),
    ]
    x0 = np.log([START.get(k) or {**LINK_START, **NETWORK_START}[k.rsplit(".", 1)[1]] for k in names])
    lower, upper = zip(*(_bounds(k) for k in names))

    def ratios(x: np.ndarray) -> np.ndarray:
        params = _params(names, x, networks)
        return np.concatenate([_predict_curve(params, c) / c.measured_us for c in curves])

    result = None
    for residuals in (lambda x: np.log(ratios(x)), lambda x: ratios(x) - 1):  # far off, then as MAPE counts
        result = least_squares(
            residuals,
            x0 if result is None else result.x,
            bounds=(np.log(lower), np.log(upper)),
            loss="soft_l1",
            f_scale=SCALE,
            diff_step=1e-4,
            ftol=1e-6,
            xtol=1e-6,
            max_nfev=300,
        )
    params = _params(names, result.x, networks)
    return FitResult(params, len(train), float(result.cost))


def predict(frame: pd.DataFrame, params: CollectiveParams, measured: MeasuredCollectives | None = None) -> np.ndarray:
    """Predicted microseconds of every row; a network without learned figures is priced on the default. `measured`:
    the measured machines' curves a network's cluster prices with where it is one of them (default: the model
    alone, as fitted)."""
    out = np.full(len(frame), np.nan)
    for curve in _curves(frame):
        out[curve.rows] = _predict_curve(params, curve, measured)
    return out


@dataclass(frozen=True)
class _Curve:
    network: str
    cluster: ClusterSpec
    """The network's nodes on its undescribed inter-node network."""
    collective: str
    ranks: int
    nodes: int
    rows: np.ndarray
    bytes: np.ndarray
    measured_us: np.ndarray


def _curves(frame: pd.DataFrame) -> list[_Curve]:
    out = []
    for (network, collective, ranks, _), rows in frame.groupby(GROUP, sort=True).groups.items():
        idx = frame.index.get_indexer(rows)
        part = frame.iloc[idx]
        cluster = load_cluster(VIDUR_CLUSTERS[network]).without_network()
        out.append(
            _Curve(
                network,
                cluster,
                collective,
                int(ranks),
                int(part["nodes"].iat[0]),
                idx,
                part["bytes"].to_numpy(),
                part["measured_us"].to_numpy(),
            )
        )
    return out


def _links(curve: _Curve) -> set[str]:
    """Intra-node link kinds the curve's collective crosses."""
    per_node = 2 if curve.collective == "sendrecv" and curve.nodes == 1 else -(-curve.ranks // curve.nodes)
    return set(curve.cluster.ring(range(per_node)))


def _predict_curve(params: CollectiveParams, curve: _Curve, measured: MeasuredCollectives | None = None) -> np.ndarray:
    """Microseconds of the curve's rows as Vidur timed them (send/recv on the sender)."""
    network = curve.network if curve.network in params.networks else None
    model = CollectiveModel(curve.cluster, params, network=network, measured=measured)
    return model.time(curve.collective, curve.bytes, curve.ranks, curve.nodes, sender=True).seconds * 1e6


def _bounds(name: str) -> tuple[float, float]:
    kind = name.split(".")[1] if name.split(".")[0] in LINKS else name.split(".")[0]
    return BOUNDS.get(name, BOUNDS.get(kind, (1e-2, 1e4)))


def _params(names: list[str], x: np.ndarray, networks: list[str]) -> CollectiveParams:
    v = {"node_ratio": UNCAPPED, **NCCL_LATENCY, **dict(zip(names, np.exp(x).tolist()))}
    measured = {
        n: NetworkParams(
            gpu_gbs=v[f"net.{n}.gpu_gbs"], node_gbs=v[f"net.{n}.gpu_gbs"] * v["node_ratio"], hop_us=v[f"net.{n}.hop_us"]
        )
        for n in networks
    }
    if measured:
        gpu = float(np.exp(np.mean([np.log(m.gpu_gbs) for m in measured.values()])))
        hop = float(np.exp(np.mean([np.log(m.hop_us) for m in measured.values()])))
        default = NetworkParams(gpu, gpu * v["node_ratio"], hop)
    else:
        default = NetworkParams(
            NETWORK_START["gpu_gbs"], NETWORK_START["gpu_gbs"] * v["node_ratio"], NETWORK_START["hop_us"]
        )
    seen = {link for link in LINKS if f"{link}.efficiency" in v}
    if not seen:
        raise ValueError("the measurements cross no intra-node link")

    def link(name: str) -> LinkParams:
        source = name if name in seen else FALLBACK[name] if FALLBACK[name] in seen else sorted(seen)[0]
        return LinkParams(v[f"{source}.efficiency"], v[f"{name}.hop_us"])

    return CollectiveParams(
        links={name: link(name) for name in LINKS},
        base_us={p: v[f"base_us.{p}"] for p in ("LL", "LL128", "simple")},
        hop_ratio={p: v[f"hop_ratio.{p}"] for p in ("LL", "LL128")},
        bandwidth_ratio={p: v[f"bandwidth_ratio.{p}"] for p in ("LL", "LL128")},
        p2p_gain=v["p2p_gain"],
        nvls_us=v["nvls_us"],
        networks=measured,
        default_network=default,
    )


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reference(machine: str) -> MeasuredMachine:
    """The nodes a measured machine was: its cluster spec's (`VIDUR_CLUSTERS`), read without its `measured_as`,
    which names the curves being built."""
    raw = json.loads(cluster_file(VIDUR_CLUSTERS[machine]).read_bytes())
    return MeasuredMachine.of(parse_cluster({**raw, "measured_as": None}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        default=shipped_dataset(),
        help="Vidur-layout collectives Parquet (default: the shipped data/vidur/collectives.parquet)",
    )
    parser.add_argument("--out", type=Path, default=shipped_path(), help="where to write the parameters (JSON)")
    parser.add_argument(
        "--measured-out", type=Path, default=measured_path(), help="where to write the measured machines' curves (JSON)"
    )
    args = parser.parse_args(argv)
    frame = load_collectives(args.dataset)
    result = fit(frame)
    used = frame[frame["duplicate_of"].isna()]
    provenance = {
        "dataset": args.dataset.name,
        "sha256": _file_sha256(args.dataset),
        "rows": result.rows,
        "networks": {n: int(c) for n, c in used["network"].value_counts().sort_index().items()},
        "left_out": sorted(
            {
                f"{r.network} {r.collective} (copy of {r.duplicate_of})"
                for r in frame[frame["duplicate_of"].notna()].itertuples()
            }
        ),
        "loss": f"soft_l1 of log(predicted/measured), then of predicted/measured - 1, scale {SCALE}",
        "cost": round(result.cost, 6),
    }
    params = CollectiveParams(**{**result.params.__dict__, "provenance": provenance})
    curves = build(frame)
    method = (
        f"median per 1/{KNOTS_PER_OCTAVE} octave, never decreasing; past the largest size the bus bandwidth of a "
        f"Theil-Sen line through the largest {LARGE_OCTAVES} octaves' rows; one-node rows only"
    )
    about = {"dataset": args.dataset.name, "sha256": provenance["sha256"], "method": method}
    measured = MeasuredCollectives(curves.machines, {m: _reference(m) for m in curves.machines}, about).to_json()
    write_atomic(args.out, (json.dumps(params.to_json(), indent=1, sort_keys=True) + "\n").encode())
    print(f"fitted on {result.rows} rows of {args.dataset} -> {args.out} ({params.digest[:12]})")
    write_atomic(args.measured_out, (json.dumps(measured, indent=1, sort_keys=True) + "\n").encode())
    print(f"{sum(map(len, curves.machines.values()))} curves of {len(curves.machines)} machines -> {args.measured_out}")


if __name__ == "__main__":
    main()
