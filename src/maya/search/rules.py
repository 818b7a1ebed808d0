"""Maya's pruning rules (arXiv 2503.20191 §5), stated over parameter roles so they hold for any script:

- recompute / sequence_parallel: a point that runs out of memory with the feature on also does
  without it, so the variant without it is pruned (as out of memory);
- distributed_optimizer: a point that fits without the distributed optimizer runs about as fast with
  it, so the variant with it reuses those figures (derived);
- microbatches: without pipeline parallelism (`pp` role is 1) more micro-batches only add passes, so
  once a count fits, larger counts are pruned.

`order` sorts points so that the ones these rules learn from come first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .outcome import Outcome
from .space import Point, Space, is_on

FLAG_ROLES = ("recompute", "sequence_parallel")


@dataclass(frozen=True)
class Rules:
    space: Space

    def apply(self, point: Point, known: Mapping[Point, Outcome]) -> Outcome | None:
        """The outcome the rules imply for `point` from the `known` ones, else None (evaluate it)."""
        values = self.space.params(point)
        for role in FLAG_ROLES:
            twin = self._twin(point, role, on=True)
            if twin is not None and not is_on(values[self.space.role(role).name]):
                seen = known.get(twin)
                if seen is not None and seen.status == "oom":
                    return Outcome(
                        "pruned",
                        source="rule",
                        reason=f"out of memory even with {role} ({self._describe(twin)})",
                        world_size=seen.world_size,
                    )
        opt = self.space.role("distributed_optimizer")
        if opt is not None and is_on(values[opt.name]):
            twin = self._twin(point, "distributed_optimizer", on=False)
            seen = known.get(twin) if twin is not None else None
            if seen is not None and seen.feasible and seen.source != "rule":
                return replace(
                    seen,
                    status="derived",
                    source="rule",
                    command_hash=None,
                    trace_hash=None,
                    run_dir=None,
                    seconds=0.0,
                    reason=f"fits without distributed_optimizer ({self._describe(twin)})",
                )
        return self._microbatches(point, known)

    def _microbatches(self, point: Point, known: Mapping[Point, Outcome]) -> Outcome | None:
        mb, pp = self.space.role("microbatches"), self.space.role("pp")
        if mb is None or pp is None or self.space.params(point)[pp.name] != 1:
            return None
        axis = self.space.parameters.index(mb)
        for smaller in range(point[axis]):
            if mb.values[smaller] >= mb.values[point[axis]]:
                continue
            twin = point[:axis] + (smaller,) + point[axis + 1 :]
            seen = known.get(twin)
            if seen is not None and seen.feasible:
                return Outcome(
                    "pruned",
                    source="rule",
                    world_size=seen.world_size,
                    reason=f"fewer micro-batches already fit without pipelining ({self._describe(twin)})",
                )
        return None

    def _twin(self, point: Point, role: str, *, on: bool) -> Point | None:
        """`point` with the `role` flag switched to `on` (its first such value), if the role exists."""
        param = self.space.role(role)
        if param is None:
            return None
        axis = self.space.parameters.index(param)
        index = next((i for i, v in enumerate(param.values) if is_on(v) == on), None)
        return None if index is None else point[:axis] + (index,) + point[axis + 1 :]

    def _describe(self, point: Point) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.space.params(point).items())

    def order(self, points: list[Point]) -> list[Point]:
        """Points with the memory-saving variants (recompute, sequence parallelism on), the plain
        optimizer and fewer micro-batches first, so the rules have something to learn from."""

        def key(point: Point) -> tuple:
            values = self.space.params(point)
            flags = tuple(not is_on(values[p.name]) for r in FLAG_ROLES if (p := self.space.role(r)))
            opt = self.space.role("distributed_optimizer")
            mb = self.space.role("microbatches")
            return (flags, is_on(values[opt.name]) if opt else False, values[mb.name] if mb else 0)

        return sorted(points, key=key)
