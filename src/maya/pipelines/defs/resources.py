"""The resources every definition shares, with their defaults: the warehouse at
`maya.core.paths.warehouse_path()`, profiles under `$MAYA_PROFILES_DIR` (default `data/profiles`)."""

import dagster as dg

from maya.core import settings

from ..resources import DataSources, Warehouse


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={"warehouse": Warehouse(), "data": DataSources(profiles_dir=settings.PROFILES_DIR.get())}
    )
