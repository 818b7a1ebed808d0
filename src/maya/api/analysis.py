"""A run opened for a notebook (`open_run`), as HTA's `TraceAnalysis` opens a trace: its tables as pandas
DataFrames, read-only SQL over them, and a prediction of it. Nothing here writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maya_trace_spec import Run, TraceError, read_table

from .stages import PredictOptions, predict

if TYPE_CHECKING:
    import pandas as pd

    from maya.simulator import Prediction


class RunAnalysis:
    """A run directory (emulated, measured and imported, or synthetic) and what can be read from it."""

    def __init__(self, path: str | Path, *, warehouse: str | Path | None = None):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise TraceError(self.path, "not a run directory (a file)")
        self._run = Run(self.path)
        self.warehouse = warehouse

    def __repr__(self) -> str:
        return f"RunAnalysis({str(self.path)!r}: {self.info['source']}, {self.info['status']}, ranks {self.ranks})"

    @property
    def info(self) -> dict[str, Any]:
        """The run's row (`run.parquet`): id, source, status, hardware, world size, ..."""
        return dict(self._run.info)

    @property
    def ranks(self) -> list[int]:
        """The captured ranks."""
        return self._run.ranks

    def table(self, name: str, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Table `name` of the spec (all ranks, or `ranks`), with a `rank` column for per-rank tables."""
        return read_table(self.path, name, ranks).to_pandas()

    def calls(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Every device-API call (`api_calls`): one row per CUDA, cuBLAS, cuDNN or NCCL call."""
        return self.table("api_calls", ranks)

    def kernels(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """The kernels the calls launched (`kernels`): name, family, library."""
        return self.table("kernels", ranks)

    def ops(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """The framework ops (`ops`): name, module, phase, iteration, shapes."""
        return self.table("ops", ranks)

    def memory(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Device memory events (`memory_events`): allocations, frees, failed allocations."""
        return self.table("memory_events", ranks)

    def peak_holders(self, rank: int | None = None) -> pd.DataFrame:
        """What holds `rank`'s memory at its peak of allocated bytes (None: the rank with the largest), one row per
        inferred category and allocating frame, largest first (`maya.api.memory`; the run needs `maya emulate
        --memory-history`, else `NoMemoryHistory`)."""
        import pandas as pd

        from .memory import Holder, peak_memory

        peak = peak_memory(self.path, rank)
        columns = ["rank", *(f.name for f in dataclasses.fields(Holder))]
        rows = [{"rank": peak.rank, **dataclasses.asdict(h)} for h in peak.holders]
        return pd.DataFrame.from_records(rows, columns=columns)

    def sql(self, query: str) -> pd.DataFrame:
        """Read-only DuckDB SQL over the run's tables (views named as the tables) and the warehouse, as `maya sql
        --trace` runs it (statements that would write are refused: `maya.core.sql.QueryRefused`)."""
        import pandas as pd

        from maya.core.sql import run_query

        result = run_query(query, trace=self.path, warehouse=self.warehouse)
        return pd.DataFrame.from_records(result.rows, columns=result.columns)

    def predict(self, options: PredictOptions | None = None, **overrides: Any) -> Prediction:
        """`maya.api.predict` of this run with `options` (default `PredictOptions()`), any field replaced by a
        keyword (`run.predict(hardware="a100-sxm-80gb", dp=64)`). Stores nothing."""
        base = options or PredictOptions()
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(PredictOptions)})
        if unknown:
            raise TypeError(f"unknown prediction option(s) {', '.join(unknown)}")
        return predict(self.path, dataclasses.replace(base, **overrides))


def open_run(path: str | Path, *, warehouse: str | Path | None = None) -> RunAnalysis:
    """Open the run directory `path` for reading; `TraceError` names a missing path or a folder that is not a
    run. `warehouse`: the one `sql` attaches read-only (default `$MAYA_WAREHOUSE`)."""
    return RunAnalysis(path, warehouse=warehouse)
