"""psattn: Phase Space Attention and mean-field attention dynamics with auxiliary variables.

The names below are imported on first use (PEP 562), so ``import psattn.cli`` starts the command line
before torch is imported: a Ctrl-C while it loads is then reported like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psattn.lazy import lazy_names
from psattn.version import __version__

if TYPE_CHECKING:
    from psattn.models import AttentionConfig, DecoderLM, ModelConfig, PhaseSpaceAttention, generate, preset
    from psattn.ops import capture, momentum, psa_attention, psa_attention_reference, score_terms, shear, unshear

#: each name of the package's face -> the module that defines it
_FACE = {
    **dict.fromkeys(("AttentionConfig", "DecoderLM", "ModelConfig", "PhaseSpaceAttention", "generate", "preset"),
                    "psattn.models"),
    **dict.fromkeys(("capture", "momentum", "psa_attention", "psa_attention_reference", "score_terms", "shear",
                     "unshear"), "psattn.ops"),
}

__all__ = [
    "__version__",
    "AttentionConfig", "DecoderLM", "ModelConfig", "PhaseSpaceAttention", "capture", "generate",
    "momentum", "preset", "psa_attention", "psa_attention_reference", "score_terms", "shear", "unshear",
]


__getattr__, __dir__ = lazy_names(__name__, _FACE)
