"""``Scored``: a mask's marked positions as indices, computed once, which select what the mask selects."""

import pytest
import torch

from helpers import random_model
from psattn.models.scored import Scored, check_scored


def mask_with_an_empty_and_a_full_row() -> torch.Tensor:
    keep = torch.rand(4, 9, generator=torch.Generator().manual_seed(3)) < 0.4
    keep[1] = False  # nothing to score
    keep[2] = True  # every position
    keep[0, [0, 8]] = True
    return keep


def test_its_indices_select_what_the_mask_selects():
    keep = mask_with_an_empty_and_a_full_row()
    scored = Scored.of(keep)
    assert scored.count == int(keep.sum()) and scored.first.shape == (4, 9)  # the full row has all 9
    assert torch.equal(scored.flat, keep.flatten().nonzero().squeeze(1))
    for row in range(4):
        marked = keep[row].nonzero().squeeze(1)
        assert torch.equal(scored.first[row, : len(marked)], marked)  # each row's marked positions first, in order
        assert torch.equal(scored.filled[row], torch.arange(9) < len(marked))
    x = torch.randn(4, 9, 5, dtype=torch.float64)
    assert torch.equal(scored.take(x), x[keep])
    laid_out = x.gather(1, scored.first[..., None].expand(4, 9, 5))  # (B, Tq, 5) in first's layout
    assert torch.equal(scored.take_filled(laid_out), x[keep])


@pytest.mark.parametrize("shape", [(3, 0), (0, 5)])
def test_an_empty_batch_or_chunk_marks_nothing(shape):
    scored = Scored.of(torch.zeros(shape, dtype=torch.bool))
    assert scored.count == 0 and scored.first.shape == (shape[0], 0)
    assert scored.take(torch.randn(*shape, 2)).shape == (0, 2)


@pytest.mark.parametrize("variant", ["key_only", "symmetric", "baseline", "canon"])
def test_a_model_given_its_scored_computes_what_the_mask_gives_to_the_bit(variant):
    """The mask is indexed inside the call; a Scored built beforehand (as the trainer builds it on the host) gives
    the same logits and gradients, and both are the full forward's rows at tight tolerance."""
    model = random_model(variant, gamma=0.0 if variant == "canon" else 0.8)  # canon: a key-lag module, no gamma
    x = torch.randint(0, 37, (4, 9), generator=torch.Generator().manual_seed(0))
    keep = mask_with_an_empty_and_a_full_row()

    def logits_and_grads(scored):
        model.zero_grad()
        logits = model(x, scored=scored)  # (N, V)
        logits.square().sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    (a, a_grads), (b, b_grads) = logits_and_grads(keep), logits_and_grads(Scored.of(keep))
    assert torch.equal(a, b) and all(torch.equal(g, h) for g, h in zip(a_grads, b_grads, strict=True))
    assert torch.allclose(a, model(x)[keep], atol=1e-10)


def test_a_scored_of_another_shape_or_not_built_by_of_is_refused():
    model = random_model()
    x = torch.randint(0, 37, (4, 9))
    keep = mask_with_an_empty_and_a_full_row()
    with pytest.raises(ValueError, match=r"scored must be \(B, T\) = \(4, 9\), got a Scored of \(4, 8\)"):
        model(x, scored=Scored.of(keep[:, :8]))
    with pytest.raises(ValueError, match=r"scored must be \(B, T\) = \(4, 9\), got a Scored of \(4, 8\)"):
        model.blocks[0].attn(torch.randn(4, 9, 32, dtype=torch.float64), scored=Scored.of(keep[:, :8]))
    good = Scored.of(keep)
    with pytest.raises(ValueError, match="build it with Scored.of"):
        Scored(good.mask, good.flat, good.first[:, :3], good.filled, good.filled_flat)
    with pytest.raises(ValueError, match="build it with Scored.of"):
        Scored(good.mask, good.flat[:-1], good.first, good.filled, good.filled_flat)
    with pytest.raises(ValueError, match="on one device"):
        Scored(good.mask, good.flat.to("meta"), good.first, good.filled, good.filled_flat)
    with pytest.raises(TypeError, match="a Scored's mask must be a torch.bool tensor, got list"):
        Scored(keep.tolist(), good.flat, good.first, good.filled, good.filled_flat)
    with pytest.raises(TypeError, match="a Scored's first must be a torch.int64 tensor, got torch.int32"):
        Scored(good.mask, good.flat, good.first.int(), good.filled, good.filled_flat)
    with pytest.raises(ValueError, match="scored is a Scored on meta, the input on cpu"):
        model(x, scored=good.to("meta"))
    with pytest.raises(TypeError, match="bool tensor"):
        Scored.of(keep.long())
    with pytest.raises(TypeError, match=r"scored must be a \(B, T\) bool tensor, got list"):  # a ValueError before
        Scored.of(keep.tolist())
    with pytest.raises(ValueError, match=r"scored must be a \(B, T\) bool tensor, got \(36,\)"):
        Scored.of(keep.flatten())
    with pytest.raises(TypeError, match="a Scored or None"):
        model(x, scored=keep.tolist())


def test_check_scored_from_its_former_home_warns_once_a_call():
    from psattn.models import attention

    with pytest.warns(DeprecationWarning, match="now psattn.models.scored.check_scored"):
        assert attention.check_scored is check_scored
