"""What PSA adds to a training step, counted in dispatched operations (on a GPU, kernel launches): the
cost a step bound by the host pays, the same on every machine (``benchmarks/step_overhead.py``)."""

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from psattn import AttentionConfig, DecoderLM, ModelConfig
from psattn.timing import dispatched_operations


def test_dispatched_operations_counts_computing_operations_and_leaves_views_out():
    x = torch.randn(3, 4, requires_grad=True)
    counts = dispatched_operations(lambda: (x[:, :2] * 2).sum().backward())
    assert counts["mul"] == 2 and counts["sum"] == 1  # the forward's product and the backward's
    assert "slice" not in counts and "expand" not in counts and "empty_like" not in counts


def _extra_operations(n_layers: int, bf16: bool):
    """The operations a training step of symmetric PSA dispatches beyond plain attention's, in the same
    ``n_layers`` model; and what plain attention's step dispatches that PSA's does not."""
    tokens = torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(0))
    counts = {}
    for label, attention in (("plain", AttentionConfig("baseline", 0.0)), ("psa", AttentionConfig("symmetric", 0.8))):
        torch.manual_seed(0)
        model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_layers=n_layers, n_heads=4, attention=attention))

        def step(model=model):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(tokens)
            F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten()).backward()

        counts[label] = dispatched_operations(step)
    return counts["psa"] - counts["plain"], counts["plain"] - counts["psa"]


@pytest.mark.parametrize("bf16", [False, True])
def test_psa_adds_at_most_ten_operations_a_layer_to_a_training_step(bf16):
    """Symmetric PSA's step (forward and backward) against plain attention's in the same model: the shear
    of two streams, forward and transposed, is at most 10 operations in each layer (it was 23 with the
    rotation and the shear as separate autograd nodes), all of them elementwise."""
    one, dropped_one = _extra_operations(1, bf16)
    three, dropped_three = _extra_operations(3, bf16)
    assert not dropped_one and not dropped_three  # PSA drops nothing plain does
    assert sum(one.values()) <= 10, one
    assert three == Counter({op: 3 * n for op, n in one.items()}), (one, three)  # every layer pays the same
    assert set(one) <= {"lerp", "mul", "add", "copy_"}, one


def test_the_layers_share_one_rope_whose_tables_a_forward_pass_computes_once():
    model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_layers=3, n_heads=4, attention=AttentionConfig("symmetric", 0.8)))
    ropes = {id(block.attn.rope) for block in model.blocks}
    assert len(ropes) == 1
    calls = []
    model.blocks[0].attn.rope.register_forward_hook(lambda module, args, out: calls.append(args[1]))
    tokens = torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(0))
    model(tokens)
    assert calls == [torch.float32]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens)
    assert calls == [torch.float32, torch.float32]  # the standard shear rotates bf16 streams in fp32
    cache = model.new_cache()
    model(tokens[:, :5], cache=cache)
    model(tokens[:, 5:6], cache=cache)
    assert len(calls) == 4  # once a chunk


def test_a_context_kept_across_calls_computes_fresh_tables():
    """Only a model call keeps the tables it computed: a layer called twice with one context sees a change
    of its RoPE frequencies in between."""
    from psattn.models import PhaseSpaceAttention, build_context

    layer = PhaseSpaceAttention(32, 4, attention=AttentionConfig("symmetric", 0.8))
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0))
    context = build_context(2, 9, x.device)
    before = layer(x, context)
    layer.rope.inv_freq.mul_(3.0)
    torch.testing.assert_close(layer(x, context), layer(x, build_context(2, 9, x.device)), atol=0, rtol=0)
    assert (layer(x, context) - before).abs().max() > 1e-3
