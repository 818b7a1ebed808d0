"""Property-based fuzzing of Maya's input surfaces: each `Surface` is a hypothesis strategy of inputs and a
`check` that feeds one input to Maya. An input may be accepted or refused with one of the surface's
documented error types (whose message must name the problem); anything else is a finding:

- `crash`: another exception escaped (a traceback for the user);
- `hang`: the input ran past the surface's time limit;
- `corrupt`: a wrong answer was returned or stored, or data was lost (the check raises `Corrupt`).

The same surfaces run in the tests (`fuzz`: fixed seed, a few hundred inputs, the first finding fails the
test and is shrunk) and in `benchmarks/reliability.py` (`tally`: thousands of inputs, every finding counted).
"""

from __future__ import annotations

import re
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

FAST = 15
"""Inputs per surface in the fast path (`-m "not slow"`)."""
SURFACES = {
    "trace validate": ("trace_inputs", 120),
    "trace read": ("trace_inputs", 150),
    "kineto import": ("kineto_inputs", 150),
    "search space": ("space_inputs", 300),
    "space expression": ("space_inputs", 300),
    "estimator call frame": ("estimator_inputs", 150),
    "measurement datasets": ("dataset_inputs", 120),
    "estimators eval": ("dataset_inputs", 100),
    "vidur datasets": ("vidur_inputs", 200),
    "vidur collectives eval": ("vidur_inputs", 100),
    "vidur compute eval": ("vidur_inputs", 100),
    "cluster spec": ("spec_inputs", 200),
    "hardware catalog": ("spec_inputs", 300),
    "sql gate": ("sql_inputs", 120),
}
"""Every surface: the module of `tests/reliability` defining it and its inputs in the full test suite (sized
to run in about two minutes in all on a loaded 2-core machine)."""


def load(name: str) -> Surface:
    """The surface `name` (its module's setup runs: a small estimator trained, a SQL sandbox made, ...)."""
    import importlib

    module = importlib.import_module(f"reliability.{SURFACES[name][0]}")
    return next(s for s in module.surfaces() if s.name == name)


class Corrupt(AssertionError):
    """A check found a wrong answer returned or stored, or data lost."""


class Hang(BaseException):
    """An input ran past its time limit (a BaseException, so `except Exception` in the code under test
    cannot swallow it)."""


@dataclass
class Surface:
    name: str
    inputs: st.SearchStrategy
    check: Callable[[Any], Any]
    """Feeds one input to Maya; returns normally when it was accepted (and the answer holds)."""
    errors: tuple[type[BaseException], ...]
    """The documented error types a refusal may raise."""
    not_errors: tuple[type[BaseException], ...] = ()
    """Subclasses of `errors` that are not documented (pyarrow's errors are ValueErrors, say)."""
    timeout_s: float = 10.0
    describe: Callable[[BaseException], str] = str
    """The message a refusal shows the user (checked to be a clear one)."""
    refusal: Callable[[BaseException], bool] = lambda e: False
    """Whether a documented error counts as a refused statement (the SQL gate's own refusals)."""


@dataclass
class Tally:
    surface: str
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    """Inputs refused with a documented error."""
    gate_refusals: int = 0
    crashes: int = 0
    hangs: int = 0
    corrupt: int = 0
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    messages: dict[str, str] = field(default_factory=dict)
    """One message per documented error type, to read what users see."""
    reasons: Counter = field(default_factory=Counter)
    """Refusals by the start of their message (paths left out)."""

    def add(self, outcome: str, detail: str = "", gate: bool = False) -> None:
        self.tried += 1
        setattr(self, outcome, getattr(self, outcome) + 1)
        self.gate_refusals += gate
        if outcome in ("crashes", "hangs", "corrupt") and len(self.examples) < 5:
            self.examples.append(detail)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `Hang` in this (main) thread once `seconds` of wall time have passed."""

    def expired(signum, frame):
        raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def clear_message(text: str) -> bool:
    """A message a user can act on: says something, in a few lines, with no traceback."""
    return bool(text.strip()) and "Traceback (most recent call last)" not in text and text.count("\n") < 40


def attempt(surface: Surface, value: Any) -> tuple[str, str, bool]:
    """Feed `value` to `surface`: (outcome, detail, refused by the gate)."""
    try:
        with time_limit(surface.timeout_s):
            surface.check(value)
    except Hang as e:
        return "hangs", f"{e}: {value!r:.300}", False
    except Corrupt as e:
        return "corrupt", f"{e}: {value!r:.300}", False
    except surface.errors as e:
        if isinstance(e, surface.not_errors):
            return "crashes", f"{type(e).__name__}: {str(e)[:200]}: {value!r:.300}", False
        message = surface.describe(e)
        if not clear_message(message):
            return "crashes", f"unclear {type(e).__name__} message {message!r:.200}: {value!r:.300}", False
        return "refused", f"{type(e).__name__}\t{message}", surface.refusal(e)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        return (
            "crashes",
            (f"{type(e).__name__}: {str(e)[:200]} at {where.filename}:{where.lineno}: {value!r:.300}"),
            False,
        )
    return "accepted", "", False


SETTINGS = dict(deadline=None, database=None, print_blob=False, suppress_health_check=list(HealthCheck))


def fuzz(surface: Surface, examples: int) -> None:
    """Test: `examples` inputs with a fixed seed; the first crash, hang or corruption fails (shrunk)."""

    @settings(max_examples=examples, derandomize=True, **SETTINGS)
    @given(surface.inputs)
    def property_holds(value):
        outcome, detail, _ = attempt(surface, value)
        assert outcome in ("accepted", "refused"), f"{surface.name}: {outcome}: {detail}"

    property_holds()


def tally(surface: Surface, examples: int, random_seed: int = 0) -> Tally:
    """Benchmark: `examples` inputs; every outcome counted, nothing stops the run."""
    result = Tally(surface.name)

    @seed(random_seed)
    @settings(max_examples=examples, phases=["generate"], **SETTINGS)
    @given(surface.inputs)
    def run(value):
        outcome, detail, gate = attempt(surface, value)
        result.add(outcome, detail, gate)
        if outcome == "refused":
            kind, message = detail.split("\t", 1)
            result.errors[kind] += 1
            result.messages.setdefault(kind, message[:300])
            result.reasons[re.sub(r"/\S+", "PATH", message)[:70]] += 1

    t0 = time.perf_counter()
    run()
    result.seconds = time.perf_counter() - t0
    return result
