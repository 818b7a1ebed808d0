"""Launch floors: the time a measured call takes however little work it does (launch, dispatch, the
timer's own cost), per hardware and op of one family.

The learned models predict time relative to `max(floor, roofline)`: host-side cost overlaps the device
work of all but the smallest calls (measured times of mid-sized calls sit below floor + roofline). Unlike
the roofline alone, that baseline carries small calls across GPUs whose rooflines differ a hundredfold.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MIN_ROWS = 20
"""Measurements a (hardware, op) pair needs for a floor of its own."""


@dataclass(frozen=True)
class LaunchFloors:
    by_op: dict[str, dict[str, float]] = field(default_factory=dict)
    """hardware -> op -> seconds."""
    by_hardware: dict[str, float] = field(default_factory=dict)
    """hardware -> seconds, over all of the family's ops (the least of them)."""

    @classmethod
    def measure(cls, hardware: np.ndarray, op: np.ndarray, measured_s: np.ndarray,
                roofline_s: np.ndarray) -> LaunchFloors:
        """Per group, the time its quickest call took, when that call was dominated by fixed cost (its
        roofline is at most half of it); groups without such a call get none."""
        frame = pd.DataFrame({"hardware": hardware, "op": op, "measured": measured_s, "roofline": roofline_s})

        def floor(group: pd.DataFrame) -> float | None:
            least = group.loc[group["measured"].idxmin()]
            if len(group) < MIN_ROWS or least["roofline"] > least["measured"] / 2:
                return None
            return float(least["measured"])

        by_op: dict[str, dict[str, float]] = {}
        for (name, op_name), group in frame.groupby(["hardware", "op"], sort=True):
            value = floor(group)
            if value is not None:
                by_op.setdefault(str(name), {})[str(op_name)] = value
        by_hardware = {str(name): value for name, group in frame.groupby("hardware", sort=True)
                       if (value := floor(group)) is not None}
        return cls(by_op, by_hardware)

    def seconds(self, hardware: np.ndarray | pd.Series, op: np.ndarray | pd.Series) -> np.ndarray:
        """Per call: the floor of its (hardware, op); else its hardware's; for hardware never measured,
        the median over measured hardware of the op's floor, else of the hardware floors; else 0."""
        hardware_codes, hardware_names = pd.factorize(hardware)
        op_codes, op_names = pd.factorize(op)
        table = np.array([[self._pair(str(h), str(o)) for o in op_names] for h in hardware_names], dtype="float64")
        return table[hardware_codes, op_codes] if len(hardware_codes) else np.zeros(0)

    def _pair(self, hardware: str, op: str) -> float:
        if op in self.by_op.get(hardware, {}):
            return self.by_op[hardware][op]
        if hardware in self.by_hardware:
            return self.by_hardware[hardware]
        same_op = [ops[op] for ops in self.by_op.values() if op in ops]
        pool = same_op or list(self.by_hardware.values())
        return float(np.median(pool)) if pool else 0.0

    def to_json(self) -> dict:
        return {"by_op": self.by_op, "by_hardware": self.by_hardware}

    @classmethod
    def from_json(cls, data: dict) -> LaunchFloors:
        return cls(data["by_op"], data["by_hardware"])
