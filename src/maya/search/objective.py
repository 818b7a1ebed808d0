"""Objectives (lower is better) and the cost of an iteration."""

from __future__ import annotations

OBJECTIVES = ("time", "cost", "tokens-per-dollar")


def cost_per_iteration(iteration_ns: float, gpus: int, price_per_gpu_hour: float | None) -> float:
    """Dollars per iteration at `price_per_gpu_hour`; GPU-hours when no price is given."""
    return iteration_ns / 1e9 / 3600 * gpus * (price_per_gpu_hour if price_per_gpu_hour is not None else 1.0)


def objective_value(objective: str, iteration_ns: float, cost: float, tokens: float | None) -> float:
    """Seconds per iteration, cost per iteration, or cost per token (the inverse of tokens per dollar)."""
    if objective == "time":
        return iteration_ns / 1e9
    if objective == "cost":
        return cost
    if objective == "tokens-per-dollar":
        if not tokens:
            raise ValueError("the tokens-per-dollar objective needs `tokens_per_iteration:` in the space")
        return cost / tokens
    raise ValueError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
