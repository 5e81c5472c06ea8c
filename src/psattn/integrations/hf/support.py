"""The model types the transformers integration is tested on, and the tiny random configs it tests them with.

``TINY`` maps each tested model type to the settings (beyond ``TINY_COMMON``) of a 2-layer random model
small enough to run in milliseconds; ``tests/integrations`` checks every guarantee of ``apply_psa`` on
each of them. ``tiny_config`` builds one (offline: no weights are downloaded).
"""

from __future__ import annotations

VOCAB = 61
PAD = 0

# Small enough to run in milliseconds, with weights large enough (initializer_range) that outputs
# depend strongly on the input.
TINY_COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    max_position_embeddings=256, pad_token_id=PAD, bos_token_id=None, eos_token_id=None,
    initializer_range=0.25, tie_word_embeddings=False,
)

TINY: dict[str, dict] = {
    "llama": {},
    "qwen2": {},
    "qwen3": dict(head_dim=8),
    # A sliding window shorter than the test sequences exercises the sliding mask and the cache
    # conversion of sliding layers.
    "mistral": dict(sliding_window=6),
    # no_rope_layer_interval=2: the second layer has no RoPE at all (NoPE).
    "smollm3": dict(no_rope_layer_interval=2),
    "mixtral": dict(num_local_experts=2, num_experts_per_tok=1),
    "qwen2_moe": dict(
        num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16
    ),
    "qwen3_moe": dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, head_dim=8),
    "olmo2": {},
}
TESTED: tuple[str, ...] = tuple(TINY)


def tiny_config(model_type: str, gqa: bool = True, **overrides):
    """The config of a 2-layer model of ``model_type`` with 4 query heads and 2 (GQA) or 4 (MHA) KV heads."""
    import transformers

    fields = dict(TINY_COMMON, num_key_value_heads=2 if gqa else 4, **TINY[model_type])
    fields.update(overrides)
    return transformers.AutoConfig.for_model(model_type, **fields)
