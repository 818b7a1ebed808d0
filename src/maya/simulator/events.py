"""The engine's timed events: small classes, each knowing what to do when its time comes.

Per-call work does not go through events: the engine walks each rank's calls in a tight loop, and a
stream whose blocked head can proceed (an event version completed, a collective released) goes on a
FIFO of `(rank, stream)` pairs, processed without delay. Timed events mark where a host thread
continues after a synchronisation."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine


class Event:
    __slots__ = ("time",)

    def __init__(self, time: int):
        self.time = time

    def handle(self, engine: Engine) -> None:
        raise NotImplementedError


class HostResume(Event):
    """A rank's host thread continues issuing calls."""

    __slots__ = ("rank",)

    def __init__(self, time: int, rank: int):
        super().__init__(time)
        self.rank = rank

    def handle(self, engine: Engine) -> None:
        engine.run_host(self.rank)
