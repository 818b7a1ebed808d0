"""Event-driven multi-rank replay of traces (`maya predict`): iteration time, breakdown, MFU, memory,
cost and a Perfetto timeline of the simulated schedule; measured traces replay their own durations (with
the replay's error against the measured iteration time) or are re-targeted to another GPU, data-parallel
degree or cluster."""

from .durations import DurationProvider, MeasuredDurations, MissingDurations, RooflineDurations
from .durations.estimated import CollectiveDurations, EstimatorDurations, EstimatorsUnavailable
from .engine import Deadlock
from .predict import predict, summarize
from .report import Prediction
from .retarget import RepricedDurations
from .simulation import Simulation, simulate
from .topology import MissingRanks

__all__ = [
    "CollectiveDurations",
    "Deadlock",
    "DurationProvider",
    "EstimatorDurations",
    "EstimatorsUnavailable",
    "MeasuredDurations",
    "MissingDurations",
    "MissingRanks",
    "Prediction",
    "RepricedDurations",
    "RooflineDurations",
    "Simulation",
    "predict",
    "simulate",
    "summarize",
]
