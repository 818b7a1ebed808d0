"""The resources every definition shares, with their defaults: the warehouse at
`maya.core.paths.warehouse_path()`, profiles under `$MAYA_PROFILES_DIR` (default `data/profiles`)."""

import os

import dagster as dg

from ..resources import DataSources, Warehouse


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={"warehouse": Warehouse(), "data": DataSources(profiles_dir=os.environ.get("MAYA_PROFILES_DIR"))}
    )
