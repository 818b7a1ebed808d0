"""Evaluations → the accuracy dashboard (static HTML next to the warehouse; `maya dashboard` serves it)."""

import dagster as dg

from .. import dashboard
from ..resources import Warehouse
from .validation import estimator_validation, validation_suite


@dg.asset(deps=[estimator_validation, validation_suite], group_name="validation", kinds={"plotly", "html"})
def accuracy_dashboard(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """Predicted vs measured per hardware, error per kernel family, error over versions against the 5%
    target, latest predictions: one HTML file, rewritten only when its content changes."""
    path, changed = dashboard.build(warehouse.file)
    context.log.info(f"dashboard {'written' if changed else 'unchanged'}: {path} (serve it with `maya dashboard`)")
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(path)), "changed": changed})
