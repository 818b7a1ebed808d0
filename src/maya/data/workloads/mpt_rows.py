"""A row of the published llm-foundry MPT table (`data/published/llm_foundry_mpt.csv`) as `mpt.py`
arguments: its columns, plus what the row's table ran beyond them (data/workloads/README.md, "What
each row ran"). No Maya imports."""

from __future__ import annotations

from collections.abc import Mapping

HARDWARE = {"a100_40gb": "a100-sxm-40gb", "a100_80gb": "a100-sxm-80gb", "h100_80gb": "h100-sxm"}
"""Maya hardware catalog name of each `GPU` value."""
FLASH_SIZES = frozenset({"1b", "3b", "7b", "70b"})
"""Sizes the >= 128-GPU H100 sweep ran with `attn_impl: flash` (scripts/train/benchmarking/sweep.py)."""


def stack_settings(row: Mapping[str, str]) -> dict[str, object]:
    """FSDP and attention settings the row's runs had that the columns do not give: precision `bf16`
    rows ran Composer <= 0.11 on torch 1.13 (flat FSDP parameters); the >= 128-GPU H100 table ran
    backward pre-fetch, forward pre-fetch and flash-attn 2 for 1b/3b/7b/70b; the other rows Composer
    0.16's defaults (backward post-fetch, no forward pre-fetch, original parameters) and llm-foundry's
    triton attention. Every table limited all-gathers (the yamls)."""
    if row["Precision"] == "bf16":
        return {
            "use_orig_params": False,
            "backward_prefetch": "BACKWARD_POST",
            "forward_prefetch": False,
            "attn_impl": "triton",
        }
    if "Large Scale" in row["table"]:
        return {
            "use_orig_params": True,
            "backward_prefetch": "BACKWARD_PRE",
            "forward_prefetch": True,
            "attn_impl": "flash" if row["Model"] in FLASH_SIZES else "triton",
        }
    return {
        "use_orig_params": True,
        "backward_prefetch": "BACKWARD_POST",
        "forward_prefetch": False,
        "attn_impl": "triton",
    }


def _flag(name: str, on: object) -> str:
    return f"--{name}" if on else f"--no-{name}"


def workload_args(row: Mapping[str, str], *, steps: int = 3, sdpa_backend: str = "auto") -> list[str]:
    """`mpt.py` arguments that reproduce a table row (`steps` optimizer steps)."""
    if row["Activation CPUOffload"] == "True":
        raise ValueError("rows with activation CPU offload are not supported by mpt.py")
    if row["GPU"] not in HARDWARE:
        raise ValueError(f"unknown GPU {row['GPU']!r}; known: {', '.join(HARDWARE)}")
    stack = stack_settings(row)
    return [
        "--model",
        row["Model"],
        "--seq-len",
        row["SeqLen (T)"],
        "--micro-batch",
        row["MicroBatchSize"],
        "--grad-accum",
        row["GradAccum"],
        "--global-batch",
        row["GlobalBatchSize"],
        "--precision",
        row["Precision"],
        "--mp-mode",
        row["MP Mode"],
        "--sharding",
        row["Sharding Strategy"],
        _flag("activation-checkpointing", row["Activation Checkpointing"] == "True"),
        "--attn-impl",
        str(stack["attn_impl"]),
        "--sdpa-backend",
        sdpa_backend,
        "--backward-prefetch",
        str(stack["backward_prefetch"]),
        _flag("forward-prefetch", stack["forward_prefetch"]),
        "--limit-all-gathers",
        _flag("use-orig-params", stack["use_orig_params"]),
        "--steps",
        str(steps),
    ]
