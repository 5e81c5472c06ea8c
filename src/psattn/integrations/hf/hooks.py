"""Hook points on the attention modules of a patched transformers model.

``apply_psa`` adds the hook points of ``psattn.ops.hooks.HOOKS`` to every attention module: the same
names, shapes, positions and meaning as in psattn's own attention layer (``psattn.models.attention``).
A forward hook that returns a tensor replaces the one passing through and the attention call computes
the rest from it (activation patching, ablation), so ``psattn.ops.hooks.capture`` and ``patch`` and
the head diagnostics of ``psattn.models.heads`` work on transformers models too::

    with capture(model, "*.hook_pattern", "*.hook_score_terms") as seen:
        model(input_ids, use_cache=False)
    seen["model.layers.0.self_attn.hook_pattern"]  # (B, Hq, T, T)

With a cache, ``hook_k``, ``hook_k_sheared`` and ``hook_v`` see the new positions' keys and values
before the cache stores them (a replacement is what the cache keeps), ``hook_pattern`` covers every
key, past included, and ``hook_score_terms`` is not recorded (the past raw keys are not kept).
``hook_out`` is the attention output (B, T, Hq * Dv) before the module's output projection. Nothing
is computed for a hook point nobody listens to.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from psattn.ops.attention import attention_weights, expand_kv_heads, score_terms
from psattn.ops.hooks import HOOK_NAMES
from psattn.ops.hooks import add_hook_points as add_hook_points  # the same points as psattn's own layer


def remove_hook_points(module: nn.Module) -> None:
    """Take them away again."""
    for name in HOOK_NAMES:
        if hasattr(module, name):
            delattr(module, name)


def listened(module: nn.Module) -> bool:
    """Whether a hook is registered on any of the module's hook points (read once per attention call)."""
    points = module._modules
    return any(getattr(points[name], "active", False) for name in HOOK_NAMES if name in points)


def through(module: nn.Module, name: str, x: Tensor) -> Tensor:
    """``x`` through the module's hook point ``hook_<name>`` (its replacement, if a hook returns one)."""
    point = getattr(module, f"hook_{name}", None)
    return x if point is None or not point.active else point(x)


def output(module: nn.Module, out: Tensor) -> Tensor:
    """The attention output (B, T, Hq, Dv) through ``hook_out``, which sees it as (B, T, Hq * Dv)."""
    point = getattr(module, "hook_out", None)
    if point is None or not point.active:
        return out
    return point(out.flatten(2)).reshape(out.shape)  # (B, T, Hq * Dv) -> (B, T, Hq, Dv)


def read_score_terms(module: nn.Module, spec, starts: Tensor | None, query: Tensor, key: Tensor) -> None:
    """Pass T1..T4 of the chunk's raw streams to ``hook_score_terms`` (read-only)."""
    point = getattr(module, "hook_score_terms", None)
    if point is not None and point.active:
        point.read(score_terms(query, key, gamma_q=spec.gamma_q, gamma_k=spec.gamma_k, starts=starts,
                               boundary=spec.boundary))


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
