"""Hook points that can change what flows (TransformerLens semantics): a hook's return value replaces
the tensor, and everything after the point is computed from it."""

import pytest
import torch

from helpers import random_model
from psattn.ops.hooks import HOOK_NAMES, HookPoint, active, capture, patch
from psattn.ops.shear import shear

PLACEMENTS = ["post_rope", "pre_rope"]


def run_with(model, x, replacements, **kwargs):
    """model(x, **kwargs) with each hook point named in ``replacements`` returning the given tensor."""
    with patch(model, {name: lambda _x, t=t: t for name, t in replacements.items()}):
        return model(x, **kwargs)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_hook_that_returns_its_input_changes_nothing(placement):
    model = random_model("symmetric", placement)
    x = torch.randint(0, 37, (2, 9))
    handles = [m.register_forward_hook(lambda _m, _i, out: out) for n, m in model.named_modules()
               if n.endswith(("hook_q", "hook_k", "hook_q_sheared", "hook_k_sheared", "hook_v", "hook_out"))]
    patched = model(x)
    for h in handles:
        h.remove()
    assert torch.equal(patched, model(x))


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("variant", ["symmetric", "key_only", "query_only"])
def test_patching_raw_queries_and_keys_is_patching_their_shear(variant, placement):
    """Keys (queries) from another input patched in before the shear give what their sheared
    versions patched in after it give: the shear is computed from the replacement."""
    model = random_model(variant, placement)
    a, b = torch.randint(0, 37, (2, 9)), torch.randint(0, 37, (2, 9))
    with capture(model, "blocks.0.attn.*") as seen:
        model(b)
    for raw, sheared in (("hook_k", "hook_k_sheared"), ("hook_q", "hook_q_sheared")):
        before = run_with(model, a, {f"blocks.0.attn.{raw}": seen[f"blocks.0.attn.{raw}"]})
        after = run_with(model, a, {f"blocks.0.attn.{sheared}": seen[f"blocks.0.attn.{sheared}"]})
        assert torch.allclose(before, after, atol=1e-9), raw
        assert not torch.allclose(before, model(a), atol=1e-3), raw  # the patch did reach the output


def test_a_patched_pattern_is_the_one_attention_uses():
    model = random_model("key_only")
    x = torch.randint(0, 37, (1, 8))
    T = x.shape[1]
    previous = torch.zeros(1, 4, T, T, dtype=torch.float64)
    previous[..., 0, 0] = 1.0
    previous[..., torch.arange(1, T), torch.arange(T - 1)] = 1.0  # every head attends to t - 1
    with capture(model, "blocks.0.attn.hook_v", "blocks.0.attn.hook_out") as seen:
        run_with(model, x, {"blocks.0.attn.hook_pattern": previous})
    v = seen["blocks.0.attn.hook_v"].repeat_interleave(2, dim=1)  # (B, Hq, T, D): GQA, 2 query heads a kv head
    out = seen["blocks.0.attn.hook_out"].view(1, T, 4, 8).transpose(1, 2)  # (B, Hq, T, D)
    assert torch.allclose(out[:, :, 1:], v[:, :, :-1], atol=1e-12) and torch.allclose(out[:, :, 0], v[:, :, 0])


def test_reading_the_pattern_leaves_the_output_as_it_was():
    model = random_model("symmetric")
    x = torch.randint(0, 37, (2, 9))
    with capture(model, "*.hook_pattern", "*.hook_score_terms") as seen:
        hooked = model(x)
    assert set(seen) == {f"blocks.{i}.attn.hook_{n}" for i in (0, 1) for n in ("pattern", "score_terms")}
    assert torch.allclose(hooked, model(x), atol=1e-10)


def test_ablating_values_or_the_output_zeroes_the_layer():
    model = random_model("symmetric")
    x = torch.randint(0, 37, (2, 9))
    v = torch.zeros(2, 2, 9, 8, dtype=torch.float64)
    seen = {}
    handle = model.blocks[0].attn.register_forward_hook(lambda _m, _i, out: seen.__setitem__("attn", out))
    run_with(model, x, {"blocks.0.attn.hook_v": v})
    assert torch.equal(seen["attn"], torch.zeros_like(seen["attn"]))
    run_with(model, x, {"blocks.0.attn.hook_out": torch.zeros(2, 9, 32, dtype=torch.float64)})
    assert torch.equal(seen["attn"], torch.zeros_like(seen["attn"]))
    handle.remove()


def test_a_patched_raw_key_is_what_the_cache_keeps():
    """Cached decoding with hook_k patched at every step equals the full forward with it patched."""
    model = random_model("key_only")
    x = torch.randint(0, 37, (1, 6))
    with capture(model, "blocks.0.attn.hook_k") as seen:
        model(x)
    k = seen["blocks.0.attn.hook_k"] * 0.5  # (B, Hkv, T, D)
    full = run_with(model, x, {"blocks.0.attn.hook_k": k})
    cache, steps = model.new_cache(), []
    for t in range(6):
        steps.append(run_with(model, x[:, t : t + 1], {"blocks.0.attn.hook_k": k[:, :, t : t + 1]}, cache=cache))
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-9)
    assert torch.allclose(shear(k, 0.8)[:, :, -1:], cache.layers[0].keys[:, :, -1:], atol=1e-12)


def test_an_unhooked_layer_takes_the_few_queries_path(monkeypatch):
    model = random_model("key_only")
    x = torch.randint(0, 37, (2, 16))
    keep = torch.zeros(2, 16, dtype=torch.bool)
    keep[:, -1] = True
    want = model(x)[keep]
    attn = model.blocks[-1].attn
    monkeypatch.setattr(attn, "_attend", lambda *a: pytest.fail("the full attention ran for two scored positions"))
    assert torch.allclose(model(x, scored=keep), want, atol=1e-10)


def test_patch_always_detaches_its_hooks_and_refuses_a_name_that_matches_nothing():
    model = random_model("symmetric", gamma=0.5)
    x = torch.randint(0, 32, (1, 6))
    before = model(x)
    points = [m for m in model.modules() if isinstance(m, HookPoint)]
    assert len(points) == 2 * len(HOOK_NAMES)  # every layer has the points of the one table
    with pytest.raises(RuntimeError, match="inside"), patch(model, {"*.hook_v": torch.zeros_like}):
        assert model.blocks[0].attn.hook_v.active and model.blocks[1].attn.hook_v.active
        attn = model.blocks[0].attn
        assert active(attn) and active(attn, "hook_q", "hook_v") and not active(attn, "hook_q")
        raise RuntimeError("inside")
    assert not any(m.active for m in points) and not active(model.blocks[0].attn)  # detached on the error too
    with pytest.raises(ValueError, match="no hook point matches"):
        with patch(model, {"*.hook_v": torch.zeros_like, "*.hook_nothing": torch.zeros_like}):
            pass
    assert not any(m.active for m in points)  # nothing attached
    with patch(model, {"blocks.0.attn.hook_v": lambda v: None}) as same:  # None: read only
        assert same is model and torch.equal(model(x), before)


def test_capture_refuses_a_pattern_that_matches_nothing_among_several():
    model = random_model("symmetric", gamma=0.5)
    with pytest.raises(ValueError, match=r"no hook point matches \['\*.hook_scores'\]"):
        with capture(model, "*.hook_pattern", "*.hook_scores"):  # a misspelt second name recorded nothing for it
            pass
    assert not any(m.active for m in model.modules() if isinstance(m, HookPoint))  # nothing attached


@pytest.mark.parametrize("replace,error", [(lambda v: v[..., :2, :], ValueError), (lambda v: v.tolist(), TypeError),
                                           (lambda v: v[None], ValueError)])
def test_a_replacement_that_is_not_a_tensor_of_the_values_shape_is_refused(replace, error):
    """Values cut to 2 of 6 positions went on to CPU SDPA, which does not check the lengths of k and v: the
    logits came back, read from past the values' end. The cache is left as it was. A list, no tensor at all, was a
    ValueError too; it is a TypeError."""
    model = random_model("symmetric", gamma=0.5)
    x = torch.randint(0, 32, (1, 6))
    cache = model.new_cache()
    model(x[:, :3], cache=cache)
    with pytest.raises(error, match=r"the hook at blocks\.0\.attn\.hook_v returned .*a replacement must be a tensor "
                                         r"of the shape of the value it replaces, \(1, 2, 3, 8\)"):
        with patch(model, {"blocks.0.attn.hook_v": replace}):
            model(x[:, 3:], cache=cache)
    assert len(cache) == 3


def test_patch_refuses_hooks_that_are_not_functions():
    model = random_model("symmetric", gamma=0.5)
    with pytest.raises(ValueError, match=r"the hooks for \['\*\.hook_v'\] are not functions"):
        with patch(model, {"*.hook_v": 0.0}):
            pass
    with pytest.raises(TypeError, match="hooks must map hook point names"):
        with patch(model, ["*.hook_v"]):
            pass
    assert not any(m.active for m in model.modules() if isinstance(m, HookPoint))


def test_a_replacement_at_the_read_only_score_terms_is_refused():
    """A hook at hook_score_terms that returned new terms (an ablation of T3, say) was dropped without a word and the
    logits came back unchanged: the scores attention uses are q̂ᵀk̂. Returning None or its input still only reads."""
    model = random_model("symmetric", gamma=0.5)
    x = torch.randint(0, 32, (1, 6))
    before = model(x)
    with pytest.raises(ValueError, match=r"hook_score_terms is read-only.*patch hook_q_sheared or hook_k_sheared"):
        with patch(model, {"blocks.0.attn.hook_score_terms": lambda terms: type(terms)(*(t * 0 for t in terms))}):
            model(x)
    for reader in (lambda terms: None, lambda terms: terms):
        with patch(model, {"*.hook_score_terms": reader}):
            assert torch.equal(model(x), before)
