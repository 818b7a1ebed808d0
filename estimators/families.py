"""One predictor per kernel family, selected by family name (`PREDICTORS`)."""
from __future__ import annotations

from .family_attention import AttentionPredictor
from .family_base import FamilyPredictor, Work
from .family_copy import CopyPredictor
from .family_elementwise import ElementwisePredictor
from .family_embedding import EmbeddingPredictor
from .family_gemm import GemmPredictor
from .family_normalization import NormalizationPredictor
from .family_optimizer import OptimizerPredictor
from .family_other import OtherPredictor
from .family_reduction import ReductionPredictor
from .family_softmax import SoftmaxPredictor

PREDICTORS: dict[str, FamilyPredictor] = {p.family: p for p in (
    GemmPredictor(), AttentionPredictor(), ElementwisePredictor(), ReductionPredictor(), NormalizationPredictor(),
    SoftmaxPredictor(), EmbeddingPredictor(), OptimizerPredictor(), CopyPredictor(), OtherPredictor())}

__all__ = ["PREDICTORS", "FamilyPredictor", "Work"]
