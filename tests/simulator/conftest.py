"""Fixtures shared by the simulator's tests."""

import pytest

from maya.estimators import TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.training_data import shipped_measurements


@pytest.fixture(scope="session")
def estimator():
    """A small estimator of the memory-bound families (elementwise, normalization, softmax, reduction) from the
    shipped measurements, trained once per test process: 40 rows of each hardware, op and dtype, 30 trees."""
    measured = shipped_measurements()
    rows = measured[measured["family"].isin(("elementwise", "normalization", "softmax", "reduction"))]
    rows = rows.sample(frac=1.0, random_state=0).groupby(["hardware", "family", "op", "dtype"]).head(40)
    config = TrainConfig(params=ModelParams(n_estimators=30, max_depth=4), validate=False)
    return train(rows.reset_index(drop=True), config).estimator
