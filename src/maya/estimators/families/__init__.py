"""One predictor per kernel family, selected by family name (`PREDICTORS`)."""

from __future__ import annotations

from .attention import AttentionPredictor
from .base import FamilyPredictor, Work
from .copy import CopyPredictor
from .elementwise import ElementwisePredictor
from .embedding import EmbeddingPredictor
from .gemm import GemmPredictor
from .normalization import NormalizationPredictor
from .optimizer import OptimizerPredictor
from .other import OtherPredictor
from .reduction import ReductionPredictor
from .softmax import SoftmaxPredictor

PREDICTORS: dict[str, FamilyPredictor] = {
    p.family: p
    for p in (
        GemmPredictor(),
        AttentionPredictor(),
        ElementwisePredictor(),
        ReductionPredictor(),
        NormalizationPredictor(),
        SoftmaxPredictor(),
        EmbeddingPredictor(),
        OptimizerPredictor(),
        CopyPredictor(),
        OtherPredictor(),
    )
}

__all__ = ["PREDICTORS", "FamilyPredictor", "Work"]
