"""Dagster pipelines: kernel profiles -> warehouse -> estimator versions -> accuracy checks -> dashboard.

`maya.pipelines.definitions` loads the definitions of `defs/`; the other modules are the plain logic
they use (sources and readers of profiles, validation, warehouse tables, accuracy, dashboard).
"""
