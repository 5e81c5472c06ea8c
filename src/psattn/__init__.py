"""psattn: Phase Space Attention and mean-field attention dynamics with auxiliary variables."""

from psattn.models import AttentionConfig, DecoderLM, ModelConfig, PhaseSpaceAttention, generate, preset
from psattn.ops import capture, momentum, psa_attention, psa_attention_reference, score_terms, shear, unshear
from psattn.version import __version__

__all__ = [
    "__version__",
    "AttentionConfig", "DecoderLM", "ModelConfig", "PhaseSpaceAttention", "capture", "generate",
    "momentum", "preset", "psa_attention", "psa_attention_reference", "score_terms", "shear", "unshear",
]
