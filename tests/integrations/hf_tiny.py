"""Tiny random transformers models built from configs (offline: no weights are downloaded)."""

import torch

VOCAB = 61
PAD = 0

# Small enough to run in milliseconds, with weights large enough (initializer_range) that outputs
# depend strongly on the input, in float64 so that equivalence checks can be tight.
COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    max_position_embeddings=256, pad_token_id=PAD, bos_token_id=None, eos_token_id=None,
    initializer_range=0.25, tie_word_embeddings=False,
)

ARCH_EXTRAS = {
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
CORE = ["llama", "qwen2", "qwen3", "mistral", "smollm3"]
EXTRA = ["mixtral", "qwen2_moe", "qwen3_moe", "olmo2"]


def tiny_config(arch: str = "llama", gqa: bool = True, **overrides):
    """The config of a 2-layer model of ``arch`` with 4 query heads and 2 (GQA) or 4 (MHA) KV heads."""
    import transformers

    fields = dict(COMMON, num_key_value_heads=2 if gqa else 4, **ARCH_EXTRAS[arch])
    fields.update(overrides)
    return transformers.AutoConfig.for_model(arch, **fields)


def tiny_model(arch: str = "llama", gqa: bool = True, seed: int = 0, **overrides):
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        tiny_config(arch, gqa, **overrides), attn_implementation="sdpa", experts_implementation="eager"
    )
    return model.double().eval()


def cache_kw(cache) -> dict:
    """``{name: cache}`` for a forward/generate call: transformers 5.24 renamed ``past_key_values``
    to ``cache``."""
    import inspect

    from transformers import LlamaForCausalLM

    name = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"
    return {name: cache}


def returned_cache(output):
    """The cache of a model or generate output, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def tiny_tokenizer():
    """A word-level tokenizer over VOCAB ids (offline): id 0 is [PAD], the rest are words w1..w60."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": PAD, **{f"w{i}": i for i in range(1, VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[PAD]")
