"""What evaluating one point of a search gives: its figures, or why there are none."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

STATUSES = ("ok", "oom", "failed", "pruned", "derived")
SOURCES = ("evaluated", "capture-cache", "command-cache", "trace-cache", "rule")


@dataclass
class Outcome:
    status: str
    """ok, oom (predicted or hit while emulating), failed, pruned (a rule ruled it out) or derived
    (a rule reused another point's figures)."""
    iteration_ns: float | None = None
    peak_memory_bytes: int | None = None
    mfu: float | None = None
    """Model FLOPs utilisation (recomputation not counted)."""
    hfu: float | None = None
    """Hardware FLOPs utilisation (recomputation counted)."""
    world_size: int | None = None
    source: str = "evaluated"
    reason: str | None = None
    command_hash: str | None = None
    """What keys the capture: the command and what changes its trace (`Task.command_hash`)."""
    prediction_hash: str | None = None
    """What keys this outcome: the command hash and what changes the prediction (`prediction_hash`)."""
    trace_hash: str | None = None
    run_dir: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        """Figures that fit in memory (measured or derived)."""
        return self.status in ("ok", "derived") and self.iteration_ns is not None

    @property
    def counts(self) -> bool:
        """Whether this point cost an emulation or a simulation."""
        return self.source in ("evaluated", "capture-cache", "trace-cache") and self.status not in ("pruned", "derived")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
