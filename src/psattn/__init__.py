"""psattn: Phase Space Attention and mean-field attention dynamics with auxiliary variables."""

from .models import AttentionConfig, DecoderLM, ModelConfig, PhaseSpaceAttention, generate, preset
from .ops import capture, momentum, psa_attention, psa_attention_reference, score_terms, shear, unshear

__version__ = "0.1.0"

__all__ = [
    "AttentionConfig", "DecoderLM", "ModelConfig", "PhaseSpaceAttention", "capture", "generate",
    "momentum", "preset", "psa_attention", "psa_attention_reference", "score_terms", "shear", "unshear",
]
