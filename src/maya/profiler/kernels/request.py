"""The one entry point of a kernel campaign, behind `maya profile kernels`, `python -m maya.profiler
kernels` and the pipelines' `profiling_campaign` job: its options with their defaults and checks, the
plan of what is left to measure, and the run. Front ends only parse, call and print."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .configs import FAMILIES, parse_families

DEFAULT_BUDGET_MIN = 12.0
"""Stop cleanly before this many minutes unless told otherwise."""
DEVICES = ("cuda", "cpu")
"""`cpu` only exercises the measurement loop (tests)."""


@dataclass(frozen=True)
class CampaignRequest:
    out: Path
    """Campaign directory, created or resumed."""
    families: tuple[str, ...] = FAMILIES
    budget_min: float = DEFAULT_BUDGET_MIN
    seed: int = 0
    """Seed of the sweep order."""
    hardware: str | None = None
    """Hardware catalog name of the GPU (recorded with every measurement)."""
    device: str = "cuda"

    @classmethod
    def make(
        cls,
        out: str | Path,
        families: str | Sequence[str] | None = None,
        *,
        budget_min: float = DEFAULT_BUDGET_MIN,
        seed: int = 0,
        hardware: str | None = None,
        device: str = "cuda",
    ) -> CampaignRequest:
        """A checked request; `families` as `gemm,attention` or a list (default: all). Raises ValueError
        naming what is wrong."""
        if families is not None and not isinstance(families, str):
            families = ",".join(families)
        chosen = parse_families(families) if families else FAMILIES
        if budget_min <= 0:
            raise ValueError(f"the budget must be positive, got {budget_min} minutes")
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}; known: {', '.join(DEVICES)}")
        return cls(Path(out), chosen, budget_min, seed, hardware, device)

    def plan_lines(self) -> list[str]:
        """What is left to measure, per family and dtype, and how much is done."""
        from .campaign_store import read_measurements
        from .sweep import build_sweep, plan_summary

        done = set(read_measurements(self.out).column("config_key").to_pylist())
        pending = [c for c in build_sweep(self.families, self.seed) if c.key not in done]
        return [f"{family:>14} {dtype:>10} {count:>7}" for family, dtype, count in plan_summary(pending)] + [
            f"{len(pending)} configs to measure, {len(done)} done"
        ]

    def run(self, log: Callable[[str], None] = print):
        """Measure (or resume) the campaign; returns its `SessionResult`. Raises `NoDevice` and
        `CampaignMismatch`."""
        from .campaign import CampaignSettings, run_campaign

        settings = CampaignSettings(
            families=self.families, budget_s=self.budget_min * 60, seed=self.seed, hardware=self.hardware
        )
        return run_campaign(self.out, settings, device=self.device, log=log)
