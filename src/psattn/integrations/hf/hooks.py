"""Hook points on the attention modules of a patched transformers model.

``apply_psa`` adds the same hook points as psattn's own attention layer (see
``psattn.models.attention``) to every attention module, with the same meaning: a forward hook
that returns a tensor replaces the one passing through and the attention call computes the rest from
it (activation patching, ablation), so ``psattn.ops.hooks.capture``, patching and the head
diagnostics of ``psattn.models.heads`` work on transformers models too::

    with capture(model, "*.hook_pattern", "*.hook_score_terms") as seen:
        model(input_ids, use_cache=False)
    seen["model.layers.0.self_attn.hook_pattern"]  # (B, Hq, T, T)

- ``hook_q``: raw post-RoPE queries (B, Hq, T, D), before the shear (a replacement is sheared and,
  with a cache, is what the cache keeps as the last raw query); ``hook_q_sheared``: q̂;
- ``hook_k``: raw post-RoPE keys (B, Hkv, T, D) before the shear, only without a cache (a cache
  shears keys as it stores them: pass ``use_cache=False`` to read or patch them);
- ``hook_k_sheared``, ``hook_v``: k̂ and the values (B, Hkv, S, D) that enter attention, past included;
- ``hook_score_terms``: T1..T4 (B, Hq, T, T), only without a cache; read-only (attention uses q̂ᵀk̂);
- ``hook_pattern``: the attention pattern (B, Hq, T, S); when hooked, the call attends with the
  explicit (and possibly replaced) pattern instead of transformers' attention function.

Nothing is computed for a hook point nobody listens to.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from psattn.ops.attention import attention_weights, expand_kv_heads, score_terms
from psattn.ops.hooks import HookPoint

HOOK_NAMES = ("q", "k", "q_sheared", "k_sheared", "v", "score_terms", "pattern")


def add_hook_points(module: nn.Module) -> None:
    """Give a transformers attention module psattn's hook points (``hook_q``, ``hook_k``, ...)."""
    for name in HOOK_NAMES:
        setattr(module, f"hook_{name}", HookPoint())


def remove_hook_points(module: nn.Module) -> None:
    """Take them away again."""
    for name in HOOK_NAMES:
        if hasattr(module, f"hook_{name}"):
            delattr(module, f"hook_{name}")


def through(module: nn.Module, name: str, x: Tensor) -> Tensor:
    """``x`` through the module's hook point ``hook_<name>`` (its replacement, if a hook returns one)."""
    point = getattr(module, f"hook_{name}", None)
    return x if point is None or not point.active else point(x)


def listening(module: nn.Module, name: str) -> bool:
    """Whether a hook is registered on ``module``'s hook point ``name``."""
    point = getattr(module, f"hook_{name}", None)
    return point is not None and point.active


def read_score_terms(module: nn.Module, spec, starts: Tensor, query: Tensor, key: Tensor) -> None:
    """Pass T1..T4 of the chunk's raw streams to ``hook_score_terms`` (read-only)."""
    point = getattr(module, "hook_score_terms", None)
    if point is not None and point.active:
        point(score_terms(query, key, gamma_q=spec.gamma_q, gamma_k=spec.gamma_k, starts=starts, boundary=spec.boundary))


def pattern(module: nn.Module, q_hat: Tensor, k_hat: Tensor, mask, scaling: float | None,
            softcap: float | None = None, sinks: Tensor | None = None) -> Tensor:
    """The attention pattern (B, Hq, Tq, Tk) through ``hook_pattern``. ``mask`` is transformers' 4D
    mask (boolean, True = attend, or additive float) or None for plain causal attention; ``softcap``
    (Gemma 2) caps the logits at ±softcap with tanh before the mask, ``sinks`` (Hq,) (GPT-OSS) are one
    extra logit per head that takes part in the softmax and is dropped from the pattern."""
    Tq, Tk = q_hat.shape[-2], k_hat.shape[-2]
    if isinstance(mask, Tensor):
        mask = mask[..., :Tk]  # (B, 1, Tq, Tk), as transformers' eager attention slices it
    causal = mask is None and Tq == Tk and Tq > 1
    if softcap is None and sinks is None:
        weights = attention_weights(q_hat, k_hat, attn_mask=mask if isinstance(mask, Tensor) else None,
                                    is_causal=causal, scale=scaling)
    else:
        scale = q_hat.shape[-1] ** -0.5 if scaling is None else scaling
        scores = (q_hat @ expand_kv_heads(k_hat, q_hat.shape[1]).transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if causal:
            mask = torch.ones(Tq, Tk, dtype=torch.bool, device=scores.device).tril()
        if isinstance(mask, Tensor):
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        if sinks is None:
            weights = scores.softmax(dim=-1)
        else:
            sink = sinks.reshape(1, -1, 1, 1).to(scores.dtype).expand(scores.shape[0], -1, Tq, 1)  # (B, Hq, Tq, 1)
            weights = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]
    return through(module, "pattern", weights)  # called when hook_pattern is listened to
