"""maya_trace_spec: the open, versioned schema of Maya's device-API traces (Parquet + DuckDB).

The core (schemas, reader, writer) needs only pyarrow; validation needs pandera and the SQL
views need duckdb, imported on use.
"""

from .columns import SPEC_VERSION, TABLES, Column, Table
from .errors import TraceCorruptError, TraceError, TraceSchemaError, TraceValidationError, TraceVersionError
from .layout import table_files
from .reader import Run, inspect_file, read_file, read_table
from .schema import arrow_schema, empty_table, file_schema
from .writer import RunWriter, conform

__version__ = SPEC_VERSION

__all__ = [
    "SPEC_VERSION",
    "TABLES",
    "Column",
    "Table",
    "Run",
    "RunWriter",
    "conform",
    "inspect_file",
    "read_file",
    "read_table",
    "table_files",
    "arrow_schema",
    "empty_table",
    "file_schema",
    "TraceError",
    "TraceCorruptError",
    "TraceSchemaError",
    "TraceValidationError",
    "TraceVersionError",
]
