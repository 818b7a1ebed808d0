"""A suite kind for the tests: a row (`tokens`, `measured_s`) runs `tests/workloads/linear_bf16.py` with that
many tokens on one virtual H100 and is predicted as the llm-foundry kind predicts (whole run, estimators,
band). `tokens` 0 cannot be planned; negative tokens fail in the script."""

from pathlib import Path

import pandas as pd

from maya.validation.llm_foundry import predict  # noqa: F401 - the kind's predict
from maya.validation.plan import RowPlan
from maya.validation.store import RowKey

SCRIPT = Path(__file__).resolve().parent.parent / "workloads" / "linear_bf16.py"


def measured_s(values: pd.Series) -> float:
    return float(values["measured_s"])


def plan(row: int, values: pd.Series) -> RowPlan:
    tokens = int(values["tokens"])
    if tokens == 0:
        raise ValueError("tokens must not be 0")
    return RowPlan(
        key=RowKey(row, f"linear {tokens} tokens", "h100_80gb", "linear", 1, measured_s(values)),
        script=SCRIPT,
        args=("--tokens", str(tokens)),
        hardware="h100-sxm",
        cluster=None,
        iterations=0,
    )
