"""Backward through a patched model: fine-tuning steps reduce the loss; checkpointing agrees."""

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import VOCAB, tiny_model
from psattn.integrations.hf import apply_psa


def _batch():
    torch.manual_seed(2)
    return torch.randint(1, VOCAB, (4, 16))


@pytest.mark.parametrize("variant", ["symmetric", "key_only"])
def test_fine_tuning_steps_reduce_the_loss(variant):
    model = apply_psa(tiny_model("qwen3"), variant, 0.8).train()
    ids = _batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = model(ids, labels=ids, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]


def test_gradients_reach_the_projections_and_match_with_checkpointing():
    ids = _batch()
    grads = []
    for checkpointing in (False, True):
        model = apply_psa(tiny_model("llama"), "symmetric", 0.8).train()
        if checkpointing:
            # activation_checkpointing_enable from transformers 5.24, gradient_checkpointing_enable before
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        model(ids, labels=ids, use_cache=False).loss.backward()
        grads.append(model.model.layers[0].self_attn.k_proj.weight.grad)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-12, rtol=0)
