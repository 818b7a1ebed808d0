"""`maya validate`: suites of measured training runs (MosaicML's published MPT throughput tables,
NeuSight's end-to-end labels) emulated, predicted and compared, results in the warehouse
(`validation_rows`). Below the pipelines and the CLI, beside `maya.search`: it imports the simulator,
estimators, emulator and core only."""

from .runner import SuiteRun, resolve_version, run_suite, traces_dir
from .store import RowKey, RowResult, latest
from .suites import KINDS, Suite, SuiteError, load_suite
from .summary import Summary, summarize, to_json

__all__ = [
    "KINDS",
    "RowKey",
    "RowResult",
    "Suite",
    "SuiteError",
    "SuiteRun",
    "Summary",
    "latest",
    "load_suite",
    "resolve_version",
    "run_suite",
    "summarize",
    "to_json",
    "traces_dir",
]
