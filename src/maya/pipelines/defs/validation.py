"""Estimator versions → their accuracy (`estimator_evaluations`, `kernel_errors`, `kernel_predictions`,
`workload_predictions`), and the check that the latest version meets the 5% end-to-end target."""
import dagster as dg

from maya.estimators import Registry, RegistryError
from maya.core.warehouse import wait_for_lock

from .. import accuracy
from ..resources import DataSources, Warehouse
from .estimators import kernel_estimators

E2E_TARGET = 0.05
"""Largest acceptable mean absolute error of predicted iteration times on ground-truth workloads."""


@dg.asset(deps=[kernel_estimators], group_name="validation", kinds={"duckdb"})
def estimator_validation(context: dg.AssetExecutionContext, warehouse: Warehouse,
                         data: DataSources) -> dg.MaterializeResult:
    """Every registered version evaluated once per set of inputs (NeuSight's test split, ground truth):
    re-running with unchanged inputs evaluates nothing."""
    registry = Registry(warehouse.file)
    versions = [r.version for r in wait_for_lock(registry.versions)]
    if not versions:
        raise dg.Failure("no estimator version is registered: materialize kernel_estimators first")
    inputs = accuracy.load_inputs(data)
    with warehouse.connect() as con:
        current = {v for v, in con.execute("SELECT version FROM estimator_evaluations WHERE inputs_hash = ?",
                                           [inputs.digest]).fetchall()}
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
    latest = wait_for_lock(registry.latest)
    with warehouse.connect() as con:
        families = con.execute("SELECT family, sum(rows * mape) / sum(rows) FROM kernel_errors WHERE version = ? "
                               "GROUP BY family ORDER BY family", [latest]).fetchall()
    return dg.MaterializeResult(metadata={
        "latest_version": latest, "evaluated_now": ", ".join(evaluated) or "none (inputs unchanged)",
        "ground_truth_workloads": len(inputs.workloads), "kernel_mape_by_family": dict(families)})


@dg.asset_check(asset=estimator_validation, description="The latest estimator version predicts ground-truth "
                                                        "iteration times within 5% (mean absolute error).")
def end_to_end_error_within_5_percent(warehouse: Warehouse, data: DataSources) -> dg.AssetCheckResult:
    latest = wait_for_lock(Registry(warehouse.file).latest)
    with warehouse.connect() as con:
        row = con.execute("SELECT workloads, workload_failures, workload_mape FROM estimator_evaluations "
                          "WHERE version = ?", [latest]).fetchone()
        worst = con.execute("SELECT workload, hardware, abs(predicted_ns - measured_ns) / measured_ns "
                            "FROM workload_predictions WHERE version = ? AND predicted_ns IS NOT NULL "
                            "ORDER BY 3 DESC LIMIT 1", [latest]).fetchone()
    if row is None:
        return dg.AssetCheckResult(passed=False, metadata={"version": str(latest)},
                                   description=f"estimator version {latest} has not been evaluated")
    workloads, failures, error = row
    if workloads == 0:
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.WARN,
            metadata={"status": "no ground truth available", "version": latest,
                      "ground_truth_dir": str(data.ground_truth)},
            description=f"no ground truth available under {data.ground_truth}: end-to-end error not measured")
    metadata = {"version": latest, "workloads": workloads, "failed_predictions": failures, "target": E2E_TARGET}
    if error is None:
        return dg.AssetCheckResult(passed=False, metadata=metadata,
                                   description=f"none of the {workloads} ground-truth workload(s) could be predicted")
    metadata.update(mean_error=error, worst_workload=f"{worst[0]} on {worst[1]}: {worst[2]:.1%}")
    described = f"mean end-to-end error {error:.1%} over {workloads - failures} workload(s)"
    return dg.AssetCheckResult(passed=failures == 0 and error <= E2E_TARGET, metadata=metadata,
                               description=described + (f"; {failures} could not be predicted" if failures else ""))
