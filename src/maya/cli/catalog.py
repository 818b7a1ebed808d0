"""`maya hardware` and `maya clusters`: the GPUs and clusters Maya knows, with their key figures."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated

import typer
from rich.table import Column, Table

from .common import JSON, fail, out


def hardware_cmd(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="One GPU to show in full (a catalog name or a part's file)."),
    ] = None,
    as_json: JSON = False,
):
    """List the GPU catalog (the names --hardware takes).

    With NAME, every figure of that GPU; a .json/.yaml file describing a part is read as `--hardware`
    reads it.
    """
    from maya.core import hardware as catalog

    if name is not None:
        try:
            hw = catalog.get(name)
        except (catalog.UnknownHardware, catalog.HardwareFileError) as e:
            fail(str(e), 2)
        if as_json:
            _json(dataclasses.asdict(hw))
            return
        table = Table("field", "value", title=hw.name, title_justify="left")
        for field, value in dataclasses.asdict(hw).items():
            shown = ", ".join(f"{k} {v:g}" for k, v in value.items()) if isinstance(value, dict) else str(value)
            table.add_row(field, shown)
        out.print(table)
        return
    parts = [catalog.get(n) for n in catalog.names()]
    if as_json:
        _json([dataclasses.asdict(hw) for hw in parts])
        return
    table = Table(Column("name", no_wrap=True), "device", "memory", "HBM GB/s", "bf16 TFLOP/s", "SMs")
    for hw in parts:
        table.add_row(
            hw.name,
            hw.device_name,
            f"{hw.memory_bytes / 2**30:.0f} GiB",
            f"{hw.memory_bandwidth_gbs:,.0f}",
            f"{hw.peak_flops('bf16') / 1e12:,.0f}",
            str(hw.sm_count),
        )
    out.print(table)


def clusters_cmd(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="One cluster to show in full (a name or a .json spec file)."),
    ] = None,
    as_json: JSON = False,
):
    """List the shipped clusters (the names --cluster takes).

    With NAME, that cluster's links in words and its source's description.
    """
    from maya.core.clusters import ClusterSpecError, UnknownCluster, cluster_names, load_cluster

    try:
        specs = [load_cluster(name)] if name is not None else [load_cluster(n) for n in cluster_names()]
    except (UnknownCluster, ClusterSpecError) as e:
        fail(str(e), 2)
    if as_json:
        rows = [dataclasses.asdict(spec) for spec in specs]
        _json(rows[0] if name is not None else rows)
        return
    if name is not None:
        spec = specs[0]
        out.print(f"[bold]{spec.name}[/]: {spec.summary()}", highlight=False)
        if spec.hardware:
            out.print(f"GPU: {spec.hardware}", highlight=False)
        if spec.description:
            out.print(spec.description, highlight=False)
        return
    table = Table(Column("name", no_wrap=True), "GPU: nodes and network")
    for spec in specs:
        table.add_row(spec.name, (f"{spec.hardware}: " if spec.hardware else "") + spec.summary())
    out.print(table)


def _json(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
