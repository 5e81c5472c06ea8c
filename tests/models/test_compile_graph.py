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
