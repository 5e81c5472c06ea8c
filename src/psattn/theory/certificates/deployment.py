"""Deployment certificates: cached decoding with sheared keys equals recomputation, with O(1) extra
state; the shear costs 6d FLOPs per token per layer."""

from __future__ import annotations

import sympy as sp
import torch

from psattn.models.generate import prefill
from psattn.ops.hooks import capture
from psattn.theory.certificates.base import Evidence, certificate
from psattn.theory.flops import count_flops
from psattn.theory.operators import REFERENCE, OperatorUnderTest


def _decode(model, cache, ids, chunks):
    """Logits (B, T, V) of ``ids`` fed through ``cache`` in chunks of the given sizes."""
    out, start = [], 0
    with torch.no_grad():
        for size in chunks:
            out.append(model(ids[:, start:start + size], cache=cache))
            start += size
    return torch.cat(out, dim=1)


@certificate(
    "cache_equivalence",
    "decoding with a cache of sheared keys k̂ (plus the last raw k, and q when γ_q ≠ 0) equals the full "
    "forward pass, token by token and in chunks; the cache holds exactly the k̂ of the full pass, as many "
    "KV bytes as a plain cache, and O(1) extra state",
    "numeric",
)
def cache_equivalence(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that cached decoding equals the full forward pass (the statement above)."""
    T = 10
    ids = torch.randint(0, 37, (2, T), generator=torch.Generator().manual_seed(6))
    for variant, kv_heads in (("symmetric", 4), ("key_only", 2)):
        model = op.build_model(variant, 0.8, n_kv_heads=kv_heads)
        with torch.no_grad(), capture(model, "*.hook_k_sheared") as seen:
            full = model(ids)
        for chunks in ([1] * T, [3, 4, 3]):
            cache = op.new_cache(model)
            err = (_decode(model, cache, ids, chunks) - full).abs().max().item()
            ev.check(err < 1e-10, f"{variant}: chunks {chunks}: cached logits = full logits (max deviation {err:.1e})")
        keys_err = max((layer.keys - seen[f"blocks.{i}.attn.hook_k_sheared"]).abs().max().item()
                       for i, layer in enumerate(cache.layers))
        ev.check(keys_err < 1e-10, f"{variant}: the cache holds the sheared keys k̂ (max deviation {keys_err:.1e})")
        plain = REFERENCE.build_model("baseline", 0.0, n_kv_heads=kv_heads).new_cache()
        prefill(REFERENCE.build_model("baseline", 0.0, n_kv_heads=kv_heads), ids, plain)
        ev.check(cache.kv_bytes() == plain.kv_bytes(),
                 f"{variant}: KV bytes {cache.kv_bytes()} = those of a plain cache ({plain.kv_bytes()})")
        extra = []
        for length in (4, T):
            c = op.new_cache(model)
            prefill(model, ids[:, :length], c)
            extra.append(c.extra_state_bytes())
        ev.check(extra[0] == extra[1], f"{variant}: extra state {extra[0]} B after 4 tokens, {extra[1]} B after {T}: O(1)")


@certificate(
    "flops_per_token",
    "the shear adds 3 FLOPs per channel and stream (x + γ(x - x_prev)): 6d per token per layer for the "
    "symmetric variant (3d key-only), the same at every cache length",
    "symbolic + numeric",
)
def flops_per_token(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the shear's FLOPs per token (the statement above)."""
    gamma, x, x_prev = sp.symbols("gamma x x_prev")
    ops = sp.count_ops(x + gamma * (x - x_prev))
    ev.check(ops == 3, f"symbolic: x + γ(x - x_prev) takes {ops} operations per channel")

    d_model, n_layers = 32, 2
    ids = torch.randint(0, 37, (1, 24), generator=torch.Generator().manual_seed(7))
    base = REFERENCE.build_model("baseline", 0.0, d_model=d_model, n_layers=n_layers)
    for variant, per_channel in (("symmetric", 6), ("key_only", 3)):
        model = op.build_model(variant, 0.8, d_model=d_model, n_layers=n_layers)
        extras = []
        for length in (4, 20):
            costs = []
            for m, cache in ((model, op.new_cache(model)), (base, base.new_cache())):
                prefill(m, ids[:, :length], cache)
                with torch.no_grad():
                    costs.append(count_flops(lambda: m(ids[:, length:length + 1], cache=cache))[0])  # noqa: B023
            extras.append((costs[0] - costs[1]) / n_layers)
        ev.check(all(e == per_channel * d_model for e in extras),
                 f"{variant}: extra FLOPs per decoded token per layer {extras} at cache lengths 4 and 20 "
                 f"(expected {per_channel}d = {per_channel * d_model})")
