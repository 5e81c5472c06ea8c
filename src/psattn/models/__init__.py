"""Decoder models with PSA attention, their configs and presets, and cached generation."""

from psattn.models.attention import PhaseSpaceAttention
from psattn.models.config import AttentionConfig, ModelConfig
from psattn.models.context import AttentionContext, build_context
from psattn.models.decoder import DecoderLM
from psattn.models.generate import GenerationOutput, generate, prefill, speculative_generate
from psattn.models.presets import PRESETS, preset, preset_parameter_count

__all__ = [
    "AttentionConfig", "AttentionContext", "DecoderLM", "GenerationOutput", "ModelConfig", "PRESETS",
    "PhaseSpaceAttention", "build_context", "generate", "prefill", "preset", "preset_parameter_count",
    "speculative_generate",
]
