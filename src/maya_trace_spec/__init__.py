"""maya_trace_spec: the open, versioned schema of Maya's device-API traces (Parquet + DuckDB).

The core (schemas, reader, writer) needs only pyarrow; validation needs pandera and the SQL
views need duckdb, imported on use. The names below are imported on first use (PEP 562), so a light
submodule (`maya_trace_spec.vocabulary`, `maya_trace_spec.errors`) does not import pyarrow.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

EXPORTS = {
    "SPEC_VERSION": ".columns",
    "TABLES": ".columns",
    "Column": ".columns",
    "Table": ".columns",
    "Run": ".reader",
    "RunWriter": ".writer",
    "conform": ".writer",
    "inspect_file": ".reader",
    "read_file": ".reader",
    "read_table": ".reader",
    "table_files": ".layout",
    "arrow_schema": ".schema",
    "empty_table": ".schema",
    "file_schema": ".schema",
    "TraceError": ".errors",
    "TraceCorruptError": ".errors",
    "TraceSchemaError": ".errors",
    "TraceValidationError": ".errors",
    "TraceVersionError": ".errors",
}
"""Each re-exported name and the module it is defined in."""
__all__ = list(EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        name = "SPEC_VERSION"
    if name in EXPORTS:
        return getattr(import_module(EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
