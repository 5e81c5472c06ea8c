"""Hook points on the attention modules of a patched transformers model.

:func:`~.patch.apply_psa` adds the same hook points as psattn's own attention layer (see
:mod:`psattn.models.attention`) to every attention module, so :func:`psattn.ops.hooks.capture` and
the head diagnostics of :mod:`psattn.models.heads` work on transformers models too::

    with capture(model, "*.hook_pattern", "*.hook_score_terms") as seen:
        model(input_ids, use_cache=False)
    seen["model.layers.0.self_attn.hook_pattern"]  # (B, Hq, T, T)

- ``hook_q``, ``hook_q_sheared``: raw post-RoPE queries and q̂ (B, Hq, T, D);
- ``hook_k``: raw post-RoPE keys (B, Hkv, T, D), and ``hook_score_terms``: T1..T4 (B, Hq, T, T),
  only without a cache (a cache keeps sheared keys, not raw ones: pass ``use_cache=False``);
- ``hook_k_sheared``, ``hook_v``: k̂ and the values (B, Hkv, S, D) that enter attention, past included;
- ``hook_pattern``: the attention pattern (B, Hq, T, S).

Nothing is computed for a hook point nobody listens to.
"""

from __future__ import annotations

from torch import Tensor, nn

from psattn.ops.attention import attention_weights, score_terms
from psattn.ops.hooks import HookPoint

HOOK_NAMES = ("q", "k", "q_sheared", "k_sheared", "v", "score_terms", "pattern")


def add_hook_points(module: nn.Module) -> None:
    for name in HOOK_NAMES:
        setattr(module, f"hook_{name}", HookPoint())


def remove_hook_points(module: nn.Module) -> None:
    for name in HOOK_NAMES:
        if hasattr(module, f"hook_{name}"):
            delattr(module, f"hook_{name}")


def _listening(module: nn.Module) -> bool:
    return any(getattr(module, f"hook_{name}", None) is not None and getattr(module, f"hook_{name}").active
               for name in HOOK_NAMES)


def record(module: nn.Module, spec, starts: Tensor, query: Tensor, key: Tensor | None, q_hat: Tensor,
           k_hat: Tensor, value: Tensor, mask, scaling: float | None) -> None:
    """Pass the streams of one attention call through the module's hook points. ``key`` is the
    chunk's raw keys, or None when a cache already sheared them; ``mask`` is transformers' 4D mask
    (boolean, True = attend, or additive float) or None for plain causal attention."""
    if not _listening(module):
        return
    module.hook_q(query)
    module.hook_q_sheared(q_hat)
    module.hook_k_sheared(k_hat)
    module.hook_v(value)
    if key is not None:
        module.hook_k(key)
        if module.hook_score_terms.active:
            module.hook_score_terms(score_terms(query, key, gamma_q=spec.gamma_q, gamma_k=spec.gamma_k,
                                                starts=starts, boundary=spec.boundary))
    if module.hook_pattern.active:
        Tq, Tk = q_hat.shape[-2], k_hat.shape[-2]
        if isinstance(mask, Tensor):
            mask = mask[..., :Tk]  # (B, 1, Tq, Tk), as transformers' eager attention slices it
        module.hook_pattern(attention_weights(
            q_hat, k_hat, attn_mask=mask if isinstance(mask, Tensor) else None,
            is_causal=mask is None and Tq == Tk and Tq > 1, scale=scaling,
        ))
