"""Tiny random transformers models built from configs (offline: no weights are downloaded)."""

import torch

from psattn.integrations.hf.support import PAD, TINY, VOCAB, base_kernel, tiny_config  # noqa: F401  (re-exported for the tests)

ARCH_EXTRAS = TINY
CORE = ["llama", "qwen2", "qwen3", "mistral", "smollm3"]
EXTRA = ["mixtral", "qwen2_moe", "qwen3_moe", "olmo2"]


def tiny_model(arch: str = "llama", gqa: bool = True, seed: int = 0, attn_implementation=None, **overrides):
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        tiny_config(arch, gqa, **overrides), attn_implementation=attn_implementation or base_kernel(arch),
        experts_implementation="eager",
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
