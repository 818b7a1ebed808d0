"""Accuracy on a measurement file of any shipped layout, told apart by its columns (`vidur_data.detect_layout`):
NeuSight kernels and Vidur compute against a kernel estimator, Vidur collectives against the collective model
of each network's cluster (`CollectiveModel(cluster).predict`, so it follows the model as it improves; the model
alone, not a measured machine's curves, which would be these rows); and on
the public kernel measurements (`KERNELS_PUBLIC`, or one of their CSV files) per GPU, implementation and
direction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from maya.core import hardware
from maya.core.clusters import UnknownCluster, load_cluster

from .calls import CallFrameError
from .collective_data import VIDUR_CLUSTERS
from .collectives import CollectiveModel
from .evaluation import comparable_ns, mape
from .kernel_estimator import KernelEstimator
from .kernels_public_data import FILES, KernelsPublicFormatError, kernels_public_dir, measured_calls
from .kernels_public_data import read as read_kernels_public
from .neusight_data import NeuSightFormatError, check_complete, to_calls
from .vidur_data import VidurFormatError, check_collectives, check_compute, detect_layout

KERNELS_PUBLIC = "kernels-public"
"""The name that evaluates the shipped public kernel measurements (`data/kernels_public/`)."""


class DatasetError(ValueError):
    """The file cannot be evaluated: unreadable, of no known layout, or with nothing to compare."""


@dataclass(frozen=True)
class DatasetEvaluation:
    layout: str
    table: pd.DataFrame
    """Per op (per collective for NCCL data): `rows`, `mape` (fraction) and, for kernels, `roofline_mape` and
    the share of each pricing method; indexed by the op."""
    overall: dict
    notes: list[str] = field(default_factory=list)
    """Rows not evaluated and why."""

    def to_json(self) -> dict:
        """`{op: {"rows": N, "mape": percent}}`."""
        return {
            str(op): {"rows": int(row["rows"]), "mape": round(float(row["mape"]) * 100, 3)}
            for op, row in self.table.iterrows()
        }


def evaluate_file(
    path: str | Path, estimator: Callable[[], KernelEstimator], *, cluster: str | None = None
) -> DatasetEvaluation:
    """Evaluate `path`; `estimator` is called only for kernel layouts; `cluster` (a name or spec file) prices
    every collective row instead of each network's own cluster."""
    try:
        table = pq.read_table(path)
        table.validate(full=True)  # text that is not UTF-8 fails here, not later as a bare ArrowException
        raw = table.to_pandas()
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:  # damaged footer or pandas metadata
        raise DatasetError(f"{path}: not a readable Parquet file ({e})") from None
    try:
        layout = detect_layout(raw.columns)
        if layout == "vidur_collectives":
            return _collectives(raw, cluster)
        if layout == "vidur_compute":
            checked = check_compute(raw)
            notes = _rejections(checked.rejected) + [
                f"{n:,} rows left out: {kind}" for kind, n in checked.left_out.items()
            ]
            return _kernels(layout, checked.calls, "vidur_op", estimator, notes)
        calls = to_calls(raw)
        if len(calls):
            check_complete(calls)
        _known_devices(calls["hardware"] if len(calls) else pd.Series(dtype="str"))
        return _kernels(layout, calls, "op", estimator, [])
    except (VidurFormatError, NeuSightFormatError, CallFrameError) as e:
        raise DatasetError(f"{path}: {e}") from None


def evaluate_kernels_public(paths: list[Path] | None, estimator: Callable[[], KernelEstimator]) -> DatasetEvaluation:
    """The kernels_public rows of `paths` (None: the shipped files) against the estimator, per
    `<gpu>/<implementation>/<direction>`: `rows`, `mape` and `signed` (mean of predicted / measured - 1). A row's
    prediction is the sum of the device times of the calls it timed (`kernels_public_data.measured_calls`). The
    attention rows are those the learned attention model was fitted on: their leave-one-GPU-out figures are
    `attention_model.leave_one_gpu_out`'s."""
    paths = paths or [kernels_public_dir() / f for f in FILES]
    checked = []
    for path in paths:
        try:
            checked.append(read_kernels_public(path.read_bytes(), path.name))
        except KernelsPublicFormatError as e:
            raise DatasetError(str(e)) from None
    rows = pd.concat([c.rows for c in checked], ignore_index=True)
    notes = _rejections(pd.concat([c.rejected for c in checked], ignore_index=True))
    calls, left_out = measured_calls(rows)
    notes += [f"{n:,} rows not evaluated: {why}" for why, n in left_out.items()]
    if calls.empty:
        raise DatasetError("no rows to evaluate" + (f" ({'; '.join(notes)})" if notes else ""))
    predicted = estimator().predict(calls.drop(columns="measurement"))
    seconds = pd.Series(predicted["duration_ns"].to_numpy() * 1e-9).groupby(calls["measurement"].to_numpy()).sum()
    done = rows.iloc[seconds.index]
    frame = pd.DataFrame(
        {
            "key": (done["device"] + "/" + done["kernel_impl"] + "/" + done["direction"]).to_numpy(),
            "measured": done["time_s"].to_numpy(),
            "predicted": seconds.to_numpy(),
        }
    )
    table = pd.DataFrame.from_dict(
        {
            key: {
                "rows": len(g),
                "mape": mape(g["measured"].to_numpy(), g["predicted"].to_numpy()),
                "signed": float((g["predicted"] / g["measured"] - 1).mean()),
            }
            for key, g in frame.groupby("key", sort=True)
        },
        orient="index",
    )
    overall = {
        "rows": len(frame),
        "mape": mape(frame["measured"].to_numpy(), frame["predicted"].to_numpy()),
        "signed": float((frame["predicted"] / frame["measured"] - 1).mean()),
    }
    return DatasetEvaluation("kernels_public", table, overall, notes)


def _known_devices(devices: pd.Series) -> None:
    for device in devices.unique():
        try:
            hardware.get(device)
        except hardware.UnknownHardware:
            raise DatasetError(
                f"unknown device {device!r}: not in the hardware catalog (known: {', '.join(hardware.names())})"
            ) from None


def _kernels(
    layout: str, calls: pd.DataFrame, by: str, estimator: Callable[[], KernelEstimator], notes: list[str]
) -> DatasetEvaluation:
    if calls.empty:
        raise DatasetError("no rows to evaluate" + (f" ({'; '.join(notes)})" if notes else ""))
    predicted = estimator().predict(calls)
    frame = pd.DataFrame(
        {
            "op": calls[by].to_numpy(),
            "measured": calls["measured_ns"].to_numpy(),
            "predicted": comparable_ns(predicted, calls["timing"]),
            "roofline": predicted["roofline_ns"].to_numpy(),
            "method": predicted["method"].to_numpy(),
        }
    )
    rows = {}
    for op, group in frame.groupby("op", sort=True):
        rows[op] = {
            "rows": len(group),
            "mape": mape(group["measured"].to_numpy(), group["predicted"].to_numpy()),
            "roofline_mape": mape(group["measured"].to_numpy(), group["roofline"].to_numpy()),
            **group["method"].value_counts(normalize=True).add_prefix("share_").to_dict(),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    overall = {
        "rows": len(frame),
        "mape": mape(frame["measured"].to_numpy(), frame["predicted"].to_numpy()),
        "roofline_mape": mape(frame["measured"].to_numpy(), frame["roofline"].to_numpy()),
        **frame["method"].value_counts(normalize=True).add_prefix("share_").to_dict(),
    }
    return DatasetEvaluation(
        layout, table.fillna({c: 0.0 for c in table.columns if c.startswith("share_")}), overall, notes
    )


def _collectives(raw: pd.DataFrame, cluster: str | None) -> DatasetEvaluation:
    checked = check_collectives(raw)
    calls, notes = checked.calls, _rejections(checked.rejected)
    names = raw["collective"].astype(str).to_numpy()[calls["row_index"].to_numpy()]
    predicted = np.full(len(calls), np.nan)
    for network, rows in calls.groupby("network").groups.items():
        spec = cluster or VIDUR_CLUSTERS.get(str(network))
        try:
            model = CollectiveModel(load_cluster(spec), measured=None) if spec else None
        except UnknownCluster:
            model = None
        if model is None:
            notes.append(
                f"{len(rows):,} rows of network {network!r} not evaluated: no cluster spec "
                f"({spec or 'none known'}; pass --cluster NAME_OR_FILE)"
            )
            continue
        frame = calls.loc[rows, ["collective", "bytes", "ranks", "nodes"]]
        for (collective, ranks, nodes), layout in frame.groupby(["collective", "ranks", "nodes"]).groups.items():
            try:  # Vidur timed send/recv on the sender; a layout the cluster cannot hold (16 ranks on 4-GPU
                # nodes, send/recv over 3 nodes, ...) is noted, not evaluated
                priced = model.predict(frame.loc[layout], sender=True)["duration_ns"].to_numpy(dtype="float64")
            except ValueError as e:
                notes.append(
                    f"{len(layout):,} {collective} rows of network {network!r} ({ranks} ranks on {nodes} "
                    f"node(s)) not evaluated: {e}"
                )
                continue
            predicted[calls.index.get_indexer(layout)] = priced
    done = ~np.isnan(predicted)
    if not done.any():
        raise DatasetError("no rows to evaluate" + (f" ({'; '.join(notes)})" if notes else ""))
    frame = pd.DataFrame(
        {"op": names[done], "measured": calls["measured_ns"].to_numpy()[done], "predicted": predicted[done]}
    )
    table = pd.DataFrame.from_dict(
        {
            op: {"rows": len(g), "mape": mape(g["measured"].to_numpy(), g["predicted"].to_numpy())}
            for op, g in frame.groupby("op", sort=True)
        },
        orient="index",
    )
    overall = {"rows": len(frame), "mape": mape(frame["measured"].to_numpy(), frame["predicted"].to_numpy())}
    return DatasetEvaluation("vidur_collectives", table, overall, notes)


def _rejections(rejected: pd.DataFrame) -> list[str]:
    if rejected.empty:
        return []
    counts = rejected["reason"].value_counts()
    return [f"{n:,} rows rejected (not evaluated): {reason}" for reason, n in counts.head(5).items()] + (
        [f"... and {counts.iloc[5:].sum():,} more rejected rows"] if len(counts) > 5 else []
    )
