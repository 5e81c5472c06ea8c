"""Decoder models with PSA attention, their configs and presets, and cached generation."""

from .attention import PhaseSpaceAttention
from .config import AttentionConfig, ModelConfig
from .context import AttentionContext, build_context
from .decoder import DecoderLM
from .generate import GenerationOutput, generate, prefill, speculative_generate
from .presets import PRESETS, preset, preset_parameter_count

__all__ = [
    "AttentionConfig", "AttentionContext", "DecoderLM", "GenerationOutput", "ModelConfig", "PRESETS",
    "PhaseSpaceAttention", "build_context", "generate", "prefill", "preset", "preset_parameter_count",
    "speculative_generate",
]
