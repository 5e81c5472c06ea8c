"""PSA as a transformers attention function.

Registered in transformers' ``AttentionInterface`` (``modeling_utils.ALL_ATTENTION_FUNCTIONS``) as
``psa_sdpa`` and ``psa_eager``, with the matching mask builders registered in
``AttentionMaskInterface`` (``masking_utils.ALL_MASK_ATTENTION_FUNCTIONS``) so that padding and
packed-sequence masks are built exactly as for ``sdpa`` / ``eager``. A patched model has
``config._attn_implementation = "psa_sdpa"``; its attention modules call

    psa_sdpa(module, q, k, v, mask, scaling=..., dropout=..., psa_step=..., **kwargs)

with post-RoPE q (B, Hq, T, D) and k (B, Hkv, S, D) after ``cache.update``. When a hook point of
``psattn.ops.hooks.HOOKS`` on the module is listened to, ``update`` returns the stored, sheared keys
followed by the chunk's raw ones, and the function passes the chunk through the hook points, shears
it and hands it to the cache layer to store; when none is, ``update`` has sheared and stored the
chunk's keys itself and the function only shears the queries. Either way it gives q̂, k̂, v to
transformers' own SDPA / eager function unchanged. ``psa_step`` (a ``PSAStep``) is
injected into the module's keyword arguments by the pre-hook that ``apply_psa`` installs;
it carries the model's ``PSASpec`` (so models with different gamma coexist), the chunk's
sequence starts, and the cache layer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.modeling_utils import AttentionInterface

from psattn.integrations.hf import hooks
from psattn.integrations.hf.cache import PSALayer
from psattn.integrations.hf.spec import BASES, PSASpec
from psattn.ops.attention import expand_kv_heads
from psattn.ops.hooks import active
from psattn.ops.shear import shear


@dataclass
class PSAStep:
    """What one attention call needs beyond q, k, v: the spec, the (B, T) starts (None where no token of
    the chunk starts a sequence), the cache layer."""

    spec: PSASpec
    starts: Tensor | None
    layer: PSALayer | None


def eager_base(module):
    """The eager attention function of ``module``'s transformers architecture."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise NotImplementedError(
            f"{type(module).__name__} has no eager attention function; use attn_implementation='sdpa'"
        )
    return fn


def psa_attention_forward(
    base, module, query: Tensor, key: Tensor, value: Tensor, attention_mask, psa_step=None, **kwargs
):
    """Shear, then attend with ``base`` (a transformers attention function). Returns what base returns:
    the output (B, T, Hq, Dv) and the weights (or None)."""
    if psa_step is None:
        raise RuntimeError(
            "a psa_* attention implementation was called without PSA state: either attn_implementation was set "
            "by hand (patch the model with psattn.integrations.hf.apply_psa instead), or this model shares its "
            "config object with a model that apply_psa patched (transformers keeps the attention implementation "
            "in the config; build each model from its own copy, e.g. copy.deepcopy(config))"
        )
    spec, starts, layer = psa_step.spec, psa_step.starts, psa_step.layer
    T = query.shape[-2]
    if layer is None and key.shape[-2] != T:
        raise RuntimeError(
            f"PSA got {key.shape[-2]} keys for {T} queries without a PSA cache layer; "
            "past keys must come from a DynamicCache/PSADynamicCache used by the patched model"
        )
    if layer is not None and layer.chunk_sheared:  # no hook point listens: the cache stored the chunk's k̂ itself
        return base(module, layer.shear("q", query, starts), key, value, attention_mask, **kwargs)
    # The chunk's raw keys and values (B, Hkv, T, D): a cache layer returns its stored (sheared) ones
    # before them; the raw keys are copied, as the layer will write k̂ over them.
    raw_k = key if layer is None else key[..., -T:, :].clone()
    query, raw_k = hooks.through(module, "q", query), hooks.through(module, "k", raw_k)
    if layer is None:
        hooks.read_score_terms(module, spec, starts, query, raw_k)
        q_hat = shear(query, spec.gamma_q, starts=starts, boundary=spec.boundary)
        k_hat = shear(raw_k, spec.gamma_k, starts=starts, boundary=spec.boundary)
    else:
        q_hat, k_hat = layer.shear("q", query, starts), layer.shear("k", raw_k, starts)
    q_hat, k_hat = hooks.through(module, "q_sheared", q_hat), hooks.through(module, "k_sheared", k_hat)
    value = hooks.through(module, "v", value[..., -T:, :])
    if layer is not None:  # the chunk's k̂ and values go into the cache; attention sees every key
        k_hat, value = layer.store(k_hat, value)  # (B, Hkv, S, D)
    if active(module, "hook_pattern"):  # attend with the explicit pattern the hook saw (or returned)
        weights = hooks.pattern(module, q_hat, k_hat, attention_mask, kwargs.get("scaling"),
                                softcap=kwargs.get("softcap"), sinks=kwargs.get("s_aux"))
        weights = F.dropout(weights, kwargs.get("dropout", 0.0), module.training)
        out = (weights @ expand_kv_heads(value, q_hat.shape[1])).transpose(1, 2).contiguous()  # (B, T, Hq, Dv)
    else:
        out, weights = base(module, q_hat, k_hat, value, attention_mask, **kwargs)  # (B, T, Hq, Dv)
    return hooks.output(module, out), weights  # as transformers' attention functions return


def psa_sdpa(module, query, key, value, attention_mask, **kwargs):
    """PSA on transformers' SDPA attention function."""
    return psa_attention_forward(sdpa_attention_forward, module, query, key, value, attention_mask, **kwargs)


def psa_eager(module, query, key, value, attention_mask, **kwargs):
    """PSA on the model's own eager attention function (explicit weights, ``output_attentions``)."""
    return psa_attention_forward(eager_base(module), module, query, key, value, attention_mask, **kwargs)


IMPLEMENTATIONS: dict[str, tuple[str, Callable[..., Any], Callable[..., Any]]] = {
    "sdpa": ("psa_sdpa", psa_sdpa, sdpa_mask), "eager": ("psa_eager", psa_eager, eager_mask)}
assert tuple(IMPLEMENTATIONS) == BASES


def register_attention() -> None:
    """Register the psa_* attention functions and their mask builders (idempotent)."""
    for name, fn, mask in IMPLEMENTATIONS.values():
        AttentionInterface.register(name, fn)
        AttentionMaskInterface.register(name, mask)


def implementation_name(base: str) -> str:
    """The registered PSA implementation over ``base`` (``sdpa`` or ``eager``); TypeError for what is not a
    name, ValueError for another name."""
    if not isinstance(base, str):  # 1 was refused as an unsupported implementation, a list as unhashable
        raise TypeError(f"attn_implementation must be the name of one of {BASES}, got {type(base).__name__} {base!r}")
    if base not in IMPLEMENTATIONS:
        raise ValueError(
            f"PSA runs on one of the base attention implementations {BASES}, got {base!r} "
            "(flash and flex kernels are not supported)"
        )
    return IMPLEMENTATIONS[base][0]
