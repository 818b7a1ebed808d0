"""Errors raised when a trace cannot be read or is not valid. Each names the file and the problem."""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """A trace file or run directory that cannot be used."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TraceCorruptError(TraceError):
    """Not a Parquet file, or a truncated/damaged one."""


class TraceVersionError(TraceError):
    """Written by an unsupported major version of the spec."""


class TraceSchemaError(TraceError):
    """Missing, extra-required or mistyped columns."""


class TraceValidationError(TraceError):
    """Rows that break the spec's constraints."""
