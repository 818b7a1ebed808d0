"""Event-driven multi-rank replay of traces (`maya predict`): iteration time, breakdown, MFU, memory,
cost and a Perfetto timeline of the simulated schedule."""
from .durations import DurationProvider, MeasuredDurations, MissingDurations, RooflineDurations
from .engine import Deadlock
from .estimator_durations import EstimatorDurations, EstimatorsUnavailable
from .predict import Simulation, predict, simulate, summarize
from .report import Prediction
from .topology import MissingRanks

__all__ = ["Deadlock", "DurationProvider", "EstimatorDurations", "EstimatorsUnavailable", "MeasuredDurations",
           "MissingDurations", "MissingRanks", "Prediction", "RooflineDurations", "Simulation", "predict",
           "simulate", "summarize"]
