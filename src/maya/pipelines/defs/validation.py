"""Estimator versions → their accuracy (`estimator_evaluations`, `kernel_errors`, `kernel_predictions`,
`workload_predictions`), a validation suite run for the latest version (`validation_rows`), and the check
that the latest version meets the 5% end-to-end target on the suites' rows and the ground-truth workloads."""

import dagster as dg
from pydantic import Field

from maya.estimators import Registry, RegistryError

from .. import accuracy
from ..resources import DataSources, Warehouse
from .estimators import kernel_estimators

E2E_TARGET = 0.05
"""Largest acceptable mean absolute error of predicted iteration times on ground-truth workloads."""


class SuiteConfig(dg.Config):
    suite: str = Field(
        "llm-foundry-smoke", description="Suite to run (`maya validate`'s SUITE): a built-in name or a suite file."
    )
    rows: str | None = Field(None, description="Rows of the suite (`maya validate --rows`; default: all).")


@dg.asset(deps=[kernel_estimators], group_name="validation", kinds={"duckdb"})
def validation_suite(
    context: dg.AssetExecutionContext, config: SuiteConfig, warehouse: Warehouse
) -> dg.MaterializeResult:
    """A validation suite (default the three-row llm-foundry smoke suite) emulated and predicted with the latest
    estimator version into `validation_rows`; rows already there for this version and code are not run again.
    The full published suite is `maya validate llm-foundry` (about an hour here): its rows are judged too."""
    from maya.validation import load_suite, run_suite, summarize

    suite = load_suite(config.suite)
    run = run_suite(
        suite,
        suite.select(config.rows),
        warehouse=warehouse.file,
        on_row=lambda r: context.log.info(
            f"row {r.key.row} ({r.key.label}): {r.status}"
            + (f" {r.error_pct:+.1f}%" if r.error_pct is not None else "")
        ),
    )
    summary = summarize(run.results)
    return dg.MaterializeResult(
        metadata={
            "suite": suite.name,
            "version": run.version,
            "rows": summary.rows,
            "failed": summary.failed,
            "mean_abs_error_pct": summary.mean_abs_error_pct,
            "max_abs_error_pct": summary.max_abs_error_pct,
            "band_coverage_pct": summary.coverage_pct,
            "seconds": round(run.seconds, 1),
        }
    )


@dg.asset(deps=[kernel_estimators], group_name="validation", kinds={"duckdb"})
def estimator_validation(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """Every registered version evaluated once per set of inputs (NeuSight's test split, ground truth):
    re-running with unchanged inputs evaluates nothing."""
    registry = Registry(warehouse.file)
    versions = [r.version for r in registry.versions()]
    if not versions:
        raise dg.Failure("no estimator version is registered: materialize kernel_estimators first")
    inputs = accuracy.load_inputs(data)
    with warehouse.connect() as con:
        current = {
            v
            for (v,) in con.execute(
                "SELECT version FROM estimator_evaluations WHERE inputs_hash = ?", [inputs.digest]
            ).fetchall()
        }
    evaluated = []
    for version in versions:
        if version in current:
            continue
        try:
            evaluation = accuracy.evaluate(registry, version, inputs)
        except RegistryError as e:
            context.log.warning(f"estimator version {version} cannot be evaluated: {e}")
            continue
        with warehouse.transaction() as con:
            accuracy.store(con, evaluation, inputs.digest)
        evaluated.append(version)
    latest = registry.latest()
    with warehouse.connect() as con:
        families = con.execute(
            "SELECT family, sum(rows * mape) / sum(rows) FROM kernel_errors WHERE version = ? "
            "GROUP BY family ORDER BY family",
            [latest],
        ).fetchall()
    suites = accuracy.suite_rows(warehouse.file, latest)
    return dg.MaterializeResult(
        metadata={
            "latest_version": latest,
            "evaluated_now": ", ".join(evaluated) or "none (inputs unchanged)",
            "ground_truth_workloads": len(inputs.workloads),
            "kernel_mape_by_family": dict(families),
            "suite_rows": len(suites),
            "suite_mean_abs_error": accuracy.mean_abs_error(suites),
        }
    )


@dg.asset_check(
    asset=estimator_validation,
    description="The latest estimator version predicts measured end-to-end "
    "times within 5% (mean absolute error): the validation "
    "suites' rows and the ground-truth workloads.",
)
def end_to_end_error_within_5_percent(warehouse: Warehouse, data: DataSources) -> dg.AssetCheckResult:
    latest = Registry(warehouse.file).latest()
    with warehouse.connect() as con:
        row = con.execute("SELECT workloads FROM estimator_evaluations WHERE version = ?", [latest]).fetchone()
    if row is None:
        return dg.AssetCheckResult(
            passed=False,
            metadata={"version": str(latest)},
            description=f"estimator version {latest} has not been evaluated",
        )
    rows = accuracy.end_to_end(warehouse.file, latest)
    if rows.empty:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "status": "no ground truth available",
                "version": latest,
                "ground_truth_dir": str(data.ground_truth),
            },
            description=f"no validation suite result for {latest} and no ground truth under {data.ground_truth}: "
            "end-to-end error not measured (run `maya validate llm-foundry` or materialize "
            "validation_suite)",
        )
    failures = int(rows["predicted_ns"].isna().sum())
    workloads = int((rows["source"] == "ground truth").sum())
    metadata = {
        "version": latest,
        "workloads": workloads,
        "suite_rows": len(rows) - workloads,
        "failed_predictions": failures,
        "target": E2E_TARGET,
    }
    predicted = rows.dropna(subset=["predicted_ns"])
    if predicted.empty:
        return dg.AssetCheckResult(
            passed=False, metadata=metadata, description=f"none of the {len(rows)} end-to-end row(s) could be predicted"
        )
    error = accuracy.mean_abs_error(predicted)
    ape = (predicted["predicted_ns"] - predicted["measured_ns"]).abs() / predicted["measured_ns"]
    worst = predicted.loc[ape.idxmax()]
    metadata.update(mean_error=error, worst_workload=f"{worst['workload']} on {worst['hardware']}: {ape.max():.1%}")
    for suite, part in predicted[predicted["source"] != "ground truth"].groupby("source"):
        metadata[f"mean_error {suite}"] = accuracy.mean_abs_error(part)
    described = f"mean end-to-end error {error:.1%} over {len(predicted)} row(s)"
    return dg.AssetCheckResult(
        passed=failures == 0 and error <= E2E_TARGET,
        metadata=metadata,
        description=described + (f"; {failures} could not be predicted" if failures else ""),
    )
