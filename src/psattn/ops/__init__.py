"""The PSA operator: RoPE, momentum and shear, attention (fast, reference, score terms), cache."""

from psattn.ops.attention import ScoreTerms, attention_weights, psa_attention, psa_attention_reference, score_terms
from psattn.ops.cache import LayerCache, PSACache
from psattn.ops.hooks import HookPoint, capture
from psattn.ops.rope import RotaryEmbedding, apply_rope
from psattn.ops.shear import momentum, previous, sequence_starts, shear, unshear
from psattn.ops.variants import PLACEMENTS, VARIANTS, variant_gammas

__all__ = [
    "HookPoint", "LayerCache", "PLACEMENTS", "PSACache", "RotaryEmbedding", "ScoreTerms", "VARIANTS",
    "apply_rope", "attention_weights", "capture", "momentum", "previous", "psa_attention",
    "psa_attention_reference", "score_terms", "sequence_starts", "shear", "unshear", "variant_gammas",
]
