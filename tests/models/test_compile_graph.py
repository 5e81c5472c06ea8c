"""torch.compile sees each model as one graph: no graph break in the PSA layers (a break would split
the compiled step and cost a round trip through Python at every layer)."""

import pytest
import torch

from psattn.models import AttentionConfig, DecoderLM, ModelConfig


@pytest.mark.parametrize("variant", ["baseline", "symmetric", "key_only"])
@pytest.mark.parametrize("autocast", [False, True])
def test_the_model_traces_as_one_graph_without_breaks(variant, autocast):
    torch._dynamo.reset()
    config = ModelConfig(vocab_size=32, d_model=32, n_heads=2, n_layers=2,
                         attention=AttentionConfig(variant, 0.0 if variant == "baseline" else 0.8))
    model = DecoderLM(config)
    ids = torch.randint(0, 32, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        explained = torch._dynamo.explain(model)(ids)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_cached_decoding_breaks_the_graph_once_a_call_and_gives_the_eager_logits():
    """With a cache, ``build_context`` reads the chunk once (the ids' check and the attention path): one break a
    call, there and nowhere else; the cache's in-place write is skipped under tracing (its inference-mode checks
    broke the graph at every layer)."""
    torch._dynamo.reset()
    config = ModelConfig(vocab_size=32, d_model=32, n_heads=2, n_layers=3, attention=AttentionConfig("symmetric", 0.8))
    model = DecoderLM(config).eval()
    ids = torch.randint(0, 32, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        caches = [model.new_cache(), model.new_cache()]
        for cache in caches:
            model(ids[:, :7], cache=cache)
        explained = torch._dynamo.explain(model)(ids[:, 7:8], cache=caches[0])  # runs the call: both caches step
        model(ids[:, 7:8], cache=caches[1])
        assert explained.graph_break_count == 1
        assert explained.break_reasons[0].user_stack[-1].filename.endswith("context.py")
        compiled = torch.compile(model, backend="eager")
        for t in range(8, 10):
            torch.testing.assert_close(compiled(ids[:, t : t + 1], cache=caches[0]), model(ids[:, t : t + 1], cache=caches[1]),
                                       atol=1e-6, rtol=0)
