"""Validation suites: files of measured training runs that Maya predicts and is judged against.

Three kinds, told apart by their columns (a folder: by its `published.json`):

- `llm-foundry`: rows in the layout of `data/published/llm_foundry_mpt.csv` (MosaicML's published MPT
  throughput tables: `Model`, `SeqLen (T)`, `# GPUs`, `GPU`, `MicroBatchSize`, `GradAccum`, `Precision`,
  `MP Mode`, `Sharding Strategy`, `Activation Checkpointing`, ... and the measured `step_time_s_derived`);
  any MPT size of `mpt.py`, any GPU count (whole nodes of 8), precision `amp_bf16`, `bf16` or `amp_fp8`, GPU
  `a100_40gb`, `a100_80gb` or `h100_80gb`;
- `neusight`: rows of NeuSight's `e2e_labels.parquet` (single-GPU training of Hugging Face models; `device`,
  `model`, `batch`, `seqlen`, `fw_ms`, `bw_ms`);
- `megatron`: rows whose columns are Megatron-LM `pretrain_gpt.py` argument names plus `row`, `model`, `gpu`, `gpus`,
  `precision` and `measured_step_s` (the layout of `data/published/megatron/korthikanti2022_a100.csv`; see
  `validation/megatron.py`);
- `modded-nanogpt`: a folder of speed-run scripts with their published figures (`published.json`, `<record>/
  train_gpt.py`: `modded_nanogpt.py`).

Built-in names: `llm-foundry` (the 162 published rows), `llm-foundry-smoke` (three cheap rows of them:
what `maya dashboard` validates on its own), `neusight` (NeuSight's single-GPU training rows on GPUs of
the hardware catalog: A100 80GB PCIe, L4, V100), `korthikanti2022` (Megatron-LM GPT 22B-1T on DGX A100, full
recompute vs selective with sequence parallelism), `modded-nanogpt` (six speed-run records on 8 H100s). Any
other SUITE is a file path (`.csv` or `.parquet`) or a folder in the `published.json` layout.

`--rows` picks rows: a list of row numbers (`3,7,20-22`: a row's number is its position among the file's
data rows, from 0), or a pandas `DataFrame.query` expression over the file's columns (names with spaces in
backticks: `` `# GPUs` >= 64 ``) and these aliases: `row`, and for llm-foundry suites `model`, `seq`,
`gpus`, `gpu`, `mbs`, `ga`, `precision`, `sharding`, `ckpt` (bool); e.g.
`gpu == "h100_80gb" and model in ["1b", "7b"]`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from maya.core.paths import data_dir

KINDS = ("llm-foundry", "neusight", "megatron", "modded-nanogpt")
LLM_FOUNDRY_COLUMNS = (
    "Model",
    "SeqLen (T)",
    "# GPUs",
    "GPU",
    "MicroBatchSize",
    "GradAccum",
    "GlobalBatchSize",
    "Precision",
    "MP Mode",
    "Sharding Strategy",
    "Activation Checkpointing",
    "Activation CPUOffload",
    "step_time_s_derived",
)
NEUSIGHT_COLUMNS = ("device", "model", "mode", "seqlen", "batch", "parallel", "fw_ms", "bw_ms")
LLM_FOUNDRY_ALIASES = {
    "model": "Model",
    "seq": "SeqLen (T)",
    "gpus": "# GPUs",
    "gpu": "GPU",
    "mbs": "MicroBatchSize",
    "ga": "GradAccum",
    "precision": "Precision",
    "sharding": "Sharding Strategy",
}
MEGATRON_MARK = "measured_step_s"
"""The column that makes a CSV a megatron suite."""
SMOKE_ROWS = (81, 159, 20)
"""`llm-foundry-smoke`: 125M on 8 A100 80GB and on 8 A100 40GB (the one with a false OOM when this was
written), 1B on 8 H100: the cheapest row of each GPU, a few minutes in all."""
NEUSIGHT_DEVICES = ("NVIDIA A100 80GB PCIe", "NVIDIA L4", "Tesla V100-PCIE-32GB")
"""NeuSight's NVIDIA GPUs with single-GPU training rows that the hardware catalog has."""


class SuiteError(ValueError):
    """A suite that cannot be read, or a row selection that cannot be applied."""


@dataclass(frozen=True)
class Suite:
    name: str
    kind: str
    path: Path
    table: pd.DataFrame
    """Every row of the suite, indexed by row number, with the aliases added."""
    digest: str
    """SHA-256 of the suite's rows (the file's content, narrowed to the built-in's rows)."""

    def select(self, expr: str | None) -> pd.DataFrame:
        """The rows `expr` picks (all without one); see the module docstring."""
        if expr is None or not expr.strip():
            return self.table
        if re.fullmatch(r"[\d\s,\-]+", expr):
            wanted = _row_numbers(expr)
            missing = sorted(set(wanted) - set(self.table.index))
            if missing:
                raise SuiteError(
                    f"--rows: row(s) {', '.join(map(str, missing))} are not in suite {self.name} "
                    f"(rows {_ranges(self.table.index)})"
                )
            return self.table.loc[wanted]
        try:
            mask = self.table.eval(expr)
        except Exception as e:  # noqa: BLE001 - pandas raises many kinds; all are a bad expression
            columns = ", ".join(c if c.isidentifier() else f"`{c}`" for c in self.table.columns)
            raise SuiteError(
                f"--rows: cannot evaluate {expr!r} ({type(e).__name__}: {e}); it is a pandas query "
                f"over the columns {columns}"
            ) from None
        if not (isinstance(mask, pd.Series) and pd.api.types.is_bool_dtype(mask)):
            raise SuiteError(f"--rows: {expr!r} is not a condition on the rows (a query like 'gpus >= 64')")
        picked = self.table[mask]
        if picked.empty:
            raise SuiteError(f"--rows: {expr!r} selects no row of suite {self.name}")
        return picked


def load_suite(spec: str) -> Suite:
    """A built-in suite by name, or a suite file (`.csv`: llm-foundry layout; `.parquet`: NeuSight's)."""
    if spec in ("llm-foundry", "llm-foundry-smoke"):
        path = data_dir() / "published" / "llm_foundry_mpt.csv"
        suite = _llm_foundry(spec, path)
        if spec == "llm-foundry-smoke":
            table = suite.table.loc[list(SMOKE_ROWS)]
            return Suite(spec, suite.kind, path, table, _digest(table))
        return suite
    if spec == "korthikanti2022":
        return _megatron(spec, data_dir() / "published" / "megatron" / "korthikanti2022_a100.csv")
    if spec == "neusight":
        from maya.estimators.neusight_data import neusight_dir

        path = neusight_dir() / "e2e_labels.parquet"
        suite = _neusight(spec, path)
        table = suite.table[
            (suite.table["mode"] == "train")
            & (suite.table["parallel"] == "single")
            & suite.table["device"].isin(NEUSIGHT_DEVICES)
        ]
        return Suite(spec, suite.kind, path, table, _digest(table))
    if spec == "modded-nanogpt":
        from .modded_nanogpt import builtin_folder

        return _modded_nanogpt(spec, builtin_folder())
    path = Path(spec).expanduser()
    if path.is_dir():
        return _modded_nanogpt(path.name, path)
    if not path.is_file():
        raise SuiteError(
            f"{spec}: neither a built-in suite (llm-foundry, llm-foundry-smoke, neusight, korthikanti2022, "
            "modded-nanogpt) nor a file or folder"
        )
    if path.suffix == ".csv":
        return _megatron(path.stem, path) if MEGATRON_MARK in _csv_columns(path) else _llm_foundry(path.stem, path)
    if path.suffix == ".parquet":
        return _neusight(path.stem, path)
    raise SuiteError(f"{path}: a suite file is a .csv (llm-foundry layout) or a .parquet (NeuSight's e2e labels)")


def _llm_foundry(name: str, path: Path) -> Suite:
    try:
        table = pd.read_csv(path, dtype={"Activation Checkpointing": str, "Activation CPUOffload": str})
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: not a CSV file ({e})") from None
    _require(path, table, LLM_FOUNDRY_COLUMNS, "llm-foundry")
    table = table.assign(
        **{alias: table[column] for alias, column in LLM_FOUNDRY_ALIASES.items()},
        ckpt=table["Activation Checkpointing"].astype(str).str.lower() == "true",
    )
    table.index.name = "row"
    return Suite(name, "llm-foundry", path, table, _digest(table))


def _csv_columns(path: Path) -> list[str]:
    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: not a CSV file ({e})") from None


def _megatron(name: str, path: Path) -> Suite:
    from .megatron import REQUIRED

    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: not a CSV file ({e})") from None
    _require(path, table, (MEGATRON_MARK, *REQUIRED), "megatron")
    table = table.drop(columns="row", errors="ignore").reset_index(drop=True)  # a row's number is its position
    table.index.name = "row"
    return Suite(name, "megatron", path, table, _digest(table))


def _neusight(name: str, path: Path) -> Suite:
    try:
        table = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow's errors on a bad file vary
        raise SuiteError(f"{path}: not a Parquet file ({e})") from None
    _require(path, table, NEUSIGHT_COLUMNS, "neusight")
    table = table.reset_index(drop=True)
    table.index.name = "row"
    return Suite(name, "neusight", path, table, _digest(table))


def _modded_nanogpt(name: str, folder: Path) -> Suite:
    from .modded_nanogpt import read_folder

    try:
        table = read_folder(folder)
    except ValueError as e:
        raise SuiteError(str(e)) from None
    table.index.name = "row"
    return Suite(name, "modded-nanogpt", folder / "published.json", table, _digest(table))


def _require(path: Path, table: pd.DataFrame, columns: tuple[str, ...], kind: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise SuiteError(f"{path}: not a {kind} suite: missing column(s) {', '.join(repr(c) for c in missing)}")


def _digest(table: pd.DataFrame) -> str:
    hashed = pd.util.hash_pandas_object(table.reset_index(), index=False).to_numpy()
    return hashlib.sha256(hashed.tobytes()).hexdigest()[:16]


def _row_numbers(text: str) -> list[int]:
    rows: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise SuiteError(f"--rows: {part!r} is not a row number or a range like 20-22") from None
        if last < first:
            raise SuiteError(f"--rows: {part!r} is an empty range")
        rows += range(first, last + 1)
    return list(dict.fromkeys(rows))


def _ranges(index: pd.Index) -> str:
    values = sorted(int(i) for i in index)
    if not values:
        return "none"
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(map(str, values))
