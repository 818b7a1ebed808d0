"""The pipelines' resources: the DuckDB warehouse and where measured data comes from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import dagster as dg
import duckdb
from pydantic import Field

from maya.core import warehouse
from maya.core.paths import data_dir, warehouse_path


class Warehouse(dg.ConfigurableResource):
    """The embedded DuckDB warehouse (default `maya.core.paths.warehouse_path()`).

    Connections are opened per step and closed at once: DuckDB lets one process write the file at a
    time, so holding it briefly is what lets `maya sql` and other runs in.
    """

    path: str | None = Field(None, description="DuckDB file (default: $MAYA_WAREHOUSE or $MAYA_HOME/warehouse.duckdb).")

    @property
    def file(self) -> Path:
        return Path(self.path).expanduser() if self.path else warehouse_path()

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection with every warehouse table, up to date (`maya.core.warehouse.connect`:
        waits while another process holds the file)."""
        with closing(warehouse.connect(self.file)) as con:
            yield con

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection inside one transaction: committed on success, rolled back on any failure
        (`maya.core.warehouse.transaction`)."""
        with warehouse.transaction(self.file) as con:
            yield con


class DataSources(dg.ConfigurableResource):
    """Measured data: kernel profiling campaigns (`<profiles_dir>/<hardware>/<campaign>/`), NeuSight's and
    Vidur's public measurements and ground-truth workloads (`<ground_truth_dir>/<hardware>/results/`)."""

    profiles_dir: str | None = Field(None, description="Campaigns as <hardware>/<campaign>/ (default: data/profiles).")
    ground_truth_dir: str | None = Field(
        None, description="Ground truth as <hardware>/results/ (default: data/ground_truth)."
    )
    neusight: bool = Field(
        True, description="Ingest NeuSight's training split (one partition per GPU) and validate on its test split."
    )
    vidur: bool = Field(
        True,
        description="Ingest Vidur's compute profiles (one partition per GPU) and collectives "
        "(one partition per network).",
    )
    vidur_dir: str | None = Field(
        None, description="Folder of Vidur's compute.parquet and collectives.parquet (default: data/vidur)."
    )

    @property
    def profiles(self) -> Path:
        return Path(self.profiles_dir).expanduser() if self.profiles_dir else data_dir() / "profiles"

    @property
    def vidur_files(self) -> Path:
        return Path(self.vidur_dir).expanduser() if self.vidur_dir else data_dir() / "vidur"

    @property
    def ground_truth(self) -> Path:
        return Path(self.ground_truth_dir).expanduser() if self.ground_truth_dir else data_dir() / "ground_truth"
