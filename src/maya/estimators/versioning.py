"""Train-and-register: the step `maya estimators train` and the pipelines run."""

from __future__ import annotations

import pandas as pd

from . import gemm_reference
from .registry import Registered, Registry
from .training import TrainConfig, data_hash, measurements_frame, train


def train_version(
    measurements: pd.DataFrame, config: TrainConfig = TrainConfig(), registry: Registry | None = None
) -> Registered:
    """A registered version trained on `measurements` with `config`; when that data and config were
    already trained on (the same GEMM references' inputs too: the sources and public rows), the existing version
    (nothing is trained or written)."""
    registry = registry or Registry()
    references = gemm_reference.inputs_digest(measurements_frame(measurements))
    digest, config_digest = data_hash(measurements), config.digest(references)
    existing = registry.find(digest, config_digest)
    if existing is not None:
        return Registered(existing, reused=True)
    result = train(measurements, config)
    return registry.register(result.estimator, data_hash=digest, config_hash=config_digest, metrics=result.metrics)
