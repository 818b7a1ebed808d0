"""A kernel profiling campaign: the sweep measured in priority order, in chunks, until it is done or
the time budget would be exceeded; run again on the same directory, it resumes.

Each chunk is timed config by config (pass 1), then profiled as a whole (pass 2) and written. Before
each config the campaign checks that the config, the profiling of the chunk so far and the write
still fit in the budget (running estimates of each, plus a margin), so it stops cleanly in time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from ..device_info import DeviceInfo, describe_device, read_clocks, software_versions
from ..session import SessionResult
from .campaign_store import CampaignStore
from .configs import FAMILIES, KernelConfig
from .measure import CampaignAbort, Measurer
from .measurements import measurement_row
from .results import STATUSES, Timing
from .sweep import build_sweep
from .timing import TimingSettings
from .trace_merge import ChunkTrace, convert_chunk

Clock = Callable[[], float]


class NoDevice(Exception):
    """The campaign asked for a CUDA device and there is none."""


class ConfigMeasurer(Protocol):
    def time_config(self, config: KernelConfig) -> Timing: ...

    def profile(self, timings: Sequence[Timing], trace_path: Path) -> None: ...


@dataclass(frozen=True)
class CampaignSettings:
    families: tuple[str, ...] = FAMILIES
    budget_s: float = 12 * 60
    seed: int = 0
    hardware: str | None = None
    chunk_s: float = 20.0
    """Pass-1 time per chunk: a kill loses at most about this much work."""
    max_chunk: int = 200
    timing: TimingSettings = field(default_factory=TimingSettings)


class Budget:
    """A deadline, with a margin (3% of the budget plus 2 s) kept free for what estimates miss."""

    def __init__(self, seconds: float, clock: Clock):
        self.clock = clock
        self.deadline = clock() + seconds
        self.margin = 0.03 * seconds + 2.0

    def allows(self, seconds: float) -> bool:
        return self.clock() + seconds + self.margin <= self.deadline


@dataclass
class CostEstimate:
    """Running estimates (exponential moving averages) of the campaign's steps, in seconds; the
    starting values are deliberately pessimistic."""

    time_config_s: float = 1.0
    profile_config_s: float = 0.5
    write_s: float = 2.0

    def update(self, name: str, seconds: float) -> None:
        setattr(self, name, 0.7 * getattr(self, name) + 0.3 * seconds)

    def next_config(self, chunk_size: int) -> float:
        """Time for one more config and for profiling and writing the chunk it joins."""
        return self.time_config_s + (chunk_size + 1) * self.profile_config_s + self.write_s


class Campaign:
    def __init__(
        self,
        root: str | Path,
        settings: CampaignSettings,
        device: torch.device,
        measurer: ConfigMeasurer | None,
        clock: Clock,
        log: Callable[[str], None],
    ):
        if device.type == "cuda" and not torch.cuda.is_available():
            raise NoDevice("no CUDA device is available (torch.cuda.is_available() is False)")
        self.root = Path(root)
        self.settings = settings
        self.clock = clock
        self.log = log
        self.started = clock()
        self.budget = Budget(settings.budget_s, clock)
        self.device_info: DeviceInfo = describe_device(device)
        self.store = CampaignStore(self.root)
        self.session_id = uuid.uuid4().hex[:12]
        self.store.start_session(
            self.device_info,
            settings.hardware,
            self._session_start(),
            framework=f"torch {torch.__version__}",
            cuda_version=torch.version.cuda,
        )
        self.measurer = measurer or Measurer(device, self.device_info.l2_bytes, settings.timing)
        self.cost = CostEstimate()
        self.measured: Counter = Counter()

    def _session_start(self) -> dict:
        return {
            "id": self.session_id,
            "started_at_ns": time.time_ns(),
            "pid": os.getpid(),
            "command": sys.argv,
            "families": list(self.settings.families),
            "seed": self.settings.seed,
            "budget_s": self.settings.budget_s,
            "timing": asdict(self.settings.timing),
            "versions": software_versions(self.device_info),
            "clocks_start": read_clocks(self.device_info),
        }

    def run(self, sweep: Sequence[KernelConfig] | None = None) -> SessionResult:
        """Measure `sweep` (default: the sweep of the settings' families) in its order."""
        sweep = build_sweep(self.settings.families, self.settings.seed) if sweep is None else sweep
        done = self.store.done_keys()
        pending = [c for c in sweep if c.key not in done]
        self.log(
            f"{len(sweep)} configs in the sweep, {len(sweep) - len(pending)} already done, "
            f"budget {self.settings.budget_s:.0f} s, device {self.device_info.name}"
        )
        chunk: list[Timing] = []
        chunk_started = self.clock()
        stop = "complete"
        for config in pending:
            if not self.budget.allows(self.cost.next_config(len(chunk))):
                stop = "budget"
                break
            t0 = self.clock()
            try:
                chunk.append(self.measurer.time_config(config))
            except CampaignAbort as e:
                chunk.append(e.timing)
                stop = "cuda-error"
                self.log(f"CUDA error, stopping: {e}")
                break
            self.cost.update("time_config_s", self.clock() - t0)
            if self.clock() - chunk_started >= self.settings.chunk_s or len(chunk) >= self.settings.max_chunk:
                self._flush(chunk, profile=True)
                chunk, chunk_started = [], self.clock()
        self._flush(chunk, profile=stop != "cuda-error")
        total_done = len(done) + sum(self.measured.values())
        self.store.end_session(
            ended_at_ns=time.time_ns(),
            stop_reason=stop,
            measured={f"{f}/{s}": n for (f, s), n in sorted(self.measured.items())},
            clocks_end=read_clocks(self.device_info),
        )
        elapsed = self.clock() - self.started
        return SessionResult(stop, self.measured, total_done, len(sweep), elapsed, "sweep", self._counts())

    def _counts(self) -> tuple[str, ...]:
        """A short table of this session's configs per family and status."""
        statuses = sorted({s for _, s in self.measured}, key=STATUSES.index)
        if not statuses:
            return ()
        rows = [["family", *statuses]]
        for family in dict.fromkeys(f for f, _ in sorted(self.measured, key=lambda k: FAMILIES.index(k[0]))):
            rows.append([family, *(str(self.measured[(family, s)]) for s in statuses)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return tuple("  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows)

    def _flush(self, chunk: list[Timing], profile: bool) -> None:
        """Profile the chunk's measured configs, then write the chunk."""
        if not chunk:
            return
        ok = [t for t in chunk if t.status == "ok"]
        trace = None
        if profile and ok:
            try:
                trace = self._profile(ok)
            except Exception as e:  # keep the timed results of the chunk even if profiling breaks
                self.log(f"profiling the chunk failed, writing it without kernels: {type(e).__name__}: {e}")
        t0 = self.clock()
        measured_at = time.time_ns()
        rows = [
            measurement_row(
                t,
                trace.stats.get(t.config.key) if trace else None,
                hardware=self.settings.hardware,
                device_name=self.device_info.name,
                session_id=self.session_id,
                measured_at_ns=measured_at,
            )
            for t in chunk
        ]
        self.store.append(trace, rows)
        self.cost.update("write_s", self.clock() - t0)
        self.measured.update((t.config.family, t.status) for t in chunk)
        statuses = Counter(t.status for t in chunk)
        self.log(
            f"[{self.clock() - self.started:7.1f} s] wrote {len(chunk)} configs "
            f"({', '.join(f'{n} {s}' for s, n in statuses.most_common())}); "
            f"{sum(self.measured.values())} this session"
        )

    def _profile(self, timings: list[Timing]) -> ChunkTrace | None:
        t0 = self.clock()
        with tempfile.TemporaryDirectory(prefix="maya-chunk-") as tmp:
            path = Path(tmp) / "kineto.json"
            self.measurer.profile(timings, path)
            trace = (
                convert_chunk(path, self.store.ids, {t.config.key: t.config.to_json() for t in timings})
                if path.exists()
                else None
            )
        self.cost.update("profile_config_s", (self.clock() - t0) / len(timings))
        return trace


def run_campaign(
    root: str | Path,
    settings: CampaignSettings = CampaignSettings(),
    *,
    device: str = "cuda",
    sweep: Sequence[KernelConfig] | None = None,
    measurer: ConfigMeasurer | None = None,
    clock: Clock = time.monotonic,
    log: Callable[[str], None] = print,
) -> SessionResult:
    """Measure the sweep (default: `build_sweep` of the settings) into the campaign directory `root`,
    created or resumed."""
    return Campaign(root, settings, torch.device(device), measurer, clock, log).run(sweep)
