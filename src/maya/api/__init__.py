"""Maya's application layer: the use cases that span the stages, for every driver (the CLI, the demo, search,
validation, the pipelines) and for notebooks.

    import maya
    run = maya.open_run("runs/gpt")                       # the run's tables as DataFrames
    run.kernels().groupby("family").size()
    prediction = run.predict(hardware="a100-sxm-80gb")    # or maya.predict(path, maya.PredictOptions(...))
    prediction.to_frame()
    maya.record(prediction)                               # only when it should be kept in the warehouse
"""

from .analysis import RunAnalysis, open_run
from .memory import CappedHistory, NoMemoryHistory, PeakMemory, UntrustedHistory, peak_memory, snapshots
from .stages import (
    DEVICE_TIME_CHOICES,
    DURATION_CHOICES,
    Capture,
    CaptureInterrupted,
    DeviceTime,
    EmulateOptions,
    PredictOptions,
    capture,
    command_key,
    device_time,
    host_factor,
    predict,
    predictor_digest,
    record,
    replay,
)

__all__ = [
    "DEVICE_TIME_CHOICES",
    "DURATION_CHOICES",
    "CappedHistory",
    "UntrustedHistory",
    "Capture",
    "CaptureInterrupted",
    "DeviceTime",
    "EmulateOptions",
    "NoMemoryHistory",
    "PeakMemory",
    "PredictOptions",
    "RunAnalysis",
    "capture",
    "command_key",
    "device_time",
    "host_factor",
    "open_run",
    "peak_memory",
    "predict",
    "predictor_digest",
    "record",
    "replay",
    "snapshots",
]
