"""Decoder models with PSA attention, their configs and presets, cached generation (of token ids, or of text
with a tokenizer), and their evaluation: head scores (``heads``) and language-model metrics on held-out text
(``lm_eval``)."""

from psattn.models.attention import PhaseSpaceAttention
from psattn.models.config import AttentionConfig, ModelConfig
from psattn.models.context import AttentionContext, build_context
from psattn.models.decoder import DecoderLM
from psattn.models.generate import GenerationOutput, continue_text, generate, prefill, speculative_generate
from psattn.models.presets import PRESETS, preset, preset_parameter_count

__all__ = [
    "AttentionConfig", "AttentionContext", "DecoderLM", "GenerationOutput", "ModelConfig", "PRESETS",
    "PhaseSpaceAttention", "build_context", "continue_text", "generate", "prefill", "preset", "preset_parameter_count",
    "speculative_generate",
]
