"""Nightly validation of the registered estimators and a weekly retrain on every validated profile.
Both are idempotent: unchanged inputs reuse the version, skip evaluations and leave the dashboard."""

import dagster as dg

validate_estimators = dg.define_asset_job(
    "validate_estimators",
    selection=dg.AssetSelection.assets("estimator_validation").downstream(),
    description="Evaluate every estimator version not yet evaluated on the current inputs; refresh the dashboard.",
)
retrain_estimators = dg.define_asset_job(
    "retrain_estimators",
    selection=dg.AssetSelection.assets("kernel_estimators").downstream(),
    description="Train (or reuse) an estimator version on every validated profile, then validate it.",
)

nightly_validation = dg.ScheduleDefinition(
    name="nightly_validation",
    job=validate_estimators,
    cron_schedule="0 2 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
weekly_retrain = dg.ScheduleDefinition(
    name="weekly_retrain",
    job=retrain_estimators,
    cron_schedule="0 3 * * 0",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
