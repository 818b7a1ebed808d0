"""The code location: every definition under `defs/` (`dagster dev -m maya.pipelines.definitions`)."""

from pathlib import Path

import dagster as dg

from . import defs as defs_folder

defs = dg.ComponentTree.from_module(defs_module=defs_folder, project_root=Path(__file__).parent).build_defs()
