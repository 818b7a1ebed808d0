"""What the dashboard shows, built without the pipelines: the latest estimator version evaluated on
NeuSight's held-out kernels (and any ground truth), and a validation suite run for it. `maya dashboard`
calls `prepare` before it builds the page, so a new user's `maya demo` then `maya dashboard` opens on
figures, not on an instruction to run Dagster. Each step is skipped when its results are already stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from maya.estimators import Registry, RegistryError

from . import accuracy
from .resources import DataSources, Warehouse

DEFAULT_SUITE = "llm-foundry-smoke"
"""Three cheap published MPT rows (125M on 8 A100 80GB and 8 A100 40GB, 1B on 8 H100): a few minutes."""


class NothingToShow(Exception):
    """No estimator version is registered: there is nothing to evaluate."""


def prepare(
    warehouse: Path,
    *,
    suite: str | None = DEFAULT_SUITE,
    on_step: Callable[[str], None] = print,
    on_start: Callable[[int, int], None] | None = None,
    on_row: Callable | None = None,
) -> str:
    """Evaluate the latest version if it is not evaluated on the current inputs, then run `suite` (None:
    none) for it; returns the version. `on_step` hears each step, `on_start` / `on_row` the suite's progress."""
    registry = Registry(warehouse)
    try:
        version = registry.get("latest").version
    except RegistryError:
        raise NothingToShow(
            f"no estimator version is registered in {warehouse}: run `maya demo` or `maya estimators train` first"
        ) from None
    sources = DataSources()
    inputs = accuracy.load_inputs(sources)
    store = Warehouse(path=str(warehouse))
    with store.connect() as con:
        evaluated = con.execute(
            "SELECT count(*) FROM estimator_evaluations WHERE version = ? AND inputs_hash = ?", [version, inputs.digest]
        ).fetchone()[0]
    if not evaluated:
        on_step(
            f"evaluating estimator version {version} on {len(inputs.kernels):,} held-out kernels"
            + (f" and {len(inputs.workloads)} ground-truth workloads" if inputs.workloads else "")
        )
        evaluation = accuracy.evaluate(registry, version, inputs)
        with store.transaction() as con:
            accuracy.store(con, evaluation, inputs.digest)
    if suite is not None:
        from maya.validation import load_suite, run_suite

        loaded = load_suite(suite)
        on_step(f"validation suite {loaded.name} with {version} (rows already stored are not run again)")
        run_suite(loaded, loaded.table, version=version, warehouse=warehouse, on_start=on_start, on_row=on_row)
    return version
