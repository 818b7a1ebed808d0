"""Validated kernel profiles → a registered kernel-estimator version (`maya.estimators.train_version`:
training data and configuration already registered give back that version, nothing is retrained). Each row trains
with its `source` (`training_source`), which the version's GEMM references answer to (`gemm_reference.derive`)."""

import dagster as dg
from pydantic import Field

from maya.estimators import Registry, TrainConfig, train_version
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.vidur_data import SOURCE as VIDUR_SOURCE

from ..resources import Warehouse
from ..sources import NEUSIGHT_CAMPAIGN, VIDUR_COMPUTE_CAMPAIGN
from ..tables import CALL_COLUMNS
from .profiles import validated_kernel_profiles


def training_source(campaign: str) -> str:
    """The `source` a campaign's rows train with: the shipped sources' own names (`training_data`), else
    `profiles:<campaign>` (a profiling campaign, never taken for one of them whatever its name)."""
    return {NEUSIGHT_CAMPAIGN: "neusight", VIDUR_COMPUTE_CAMPAIGN: VIDUR_SOURCE}.get(campaign, f"profiles:{campaign}")


class TrainingConfig(dg.Config):
    sample_rows: int | None = Field(
        None, description="Train on a seeded random sample of this many validated rows (default: all)."
    )
    trees: int | None = Field(None, description="Trees per model (default: the estimators' tuned setting).")
    depth: int | None = Field(None, description="Tree depth (default: the estimators' tuned setting).")
    holdout: bool = Field(
        True, description="Hold out data to measure accuracy and uncertainty bands (off: faster, bands of zero width)."
    )


@dg.asset(deps=[validated_kernel_profiles], group_name="estimators", kinds={"xgboost", "duckdb"})
def kernel_estimators(
    context: dg.AssetExecutionContext, config: TrainingConfig, warehouse: Warehouse
) -> dg.MaterializeResult:
    """One estimator version trained on every validated kernel profile (`estimator_versions`)."""
    columns = ", ".join(f'"{c}"' for c in ("hardware", "campaign", *CALL_COLUMNS, "timing", "measured_ns"))
    with warehouse.connect() as con:
        measurements = con.execute(
            f"SELECT {columns} FROM kernel_profiles ORDER BY hardware, campaign, path, row_index"
        ).df()
    if measurements.empty:
        raise dg.Failure("no validated kernel profiles in the warehouse: materialize validated_kernel_profiles first")
    measurements["source"] = measurements.pop("campaign").map(training_source)
    if config.sample_rows is not None and config.sample_rows < len(measurements):
        measurements = measurements.sample(config.sample_rows, random_state=0).reset_index(drop=True)
    params = {k: v for k, v in (("n_estimators", config.trees), ("max_depth", config.depth)) if v is not None}
    train_config = TrainConfig(params=ModelParams(**params), validate=config.holdout)
    registry = Registry(warehouse.file)
    registered = train_version(measurements, train_config, registry)
    record = registered.record
    references = registry.gemm_references(record)
    context.log.info(
        f"{'reused' if registered.reused else 'registered'} estimator version {record.version}; "
        f"GEMM references: {references.ratios()} ({references.note})"
    )
    families = {family: m.get("validation_mape") for family, m in record.metrics.get("families", {}).items()}
    return dg.MaterializeResult(
        metadata={
            "version": record.version,
            "reused": registered.reused,
            "training_rows": record.training_rows,
            "hardware": ", ".join(record.hardware),
            "data_hash": record.data_hash,
            "gemm_references": references.ratios(),
            "validation_mape": {f: v for f, v in families.items() if v is not None},
        },
        data_version=dg.DataVersion(record.version),
    )
