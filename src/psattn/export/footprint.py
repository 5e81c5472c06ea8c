"""What a model needs on a device: flash for its weights, RAM for its KV cache and for one decode step.

- Weights: every matrix (embedding, projections, MLP) at fp32, INT8 (one signed byte a weight and one
  fp32 scale per output row: symmetric per-channel, as ONNX Runtime's and XNNPACK's weight-only INT8
  store them) or INT4 (half a byte a weight and one fp32 scale per group of 32 weights of a row, the
  common grouped INT4 layout); vectors (norms, biases) stay fp32. A tied LM head is stored once.
- KV cache (fp32): per token and layer, the sheared keys and the values of every KV head; plus PSA's
  fixed state per layer, one raw key per KV head when gamma_k != 0 and one raw query per head when
  gamma_q != 0, the same at any context (none for the plain model). :func:`measured_cache_bytes`
  fills a real cache and counts its tensors.
- One decode step: the fp32 tensors the step creates (residual, normalised input, q, k, v, the scores
  over the context, the attention output, the MLP's hidden layer, the logits), summed: an upper bound on
  what it holds at once, without the runtime itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from psattn.models.decoder import DecoderLM

KIB, MIB = 1024, 1024 * 1024
SRAM_BUDGETS = {"256 KB SRAM": 256 * KIB, "512 KB SRAM": 512 * KIB, "2 MB SRAM": 2 * MIB}
FLASH_BUDGETS = {"1 MB flash": MIB, "4 MB flash": 4 * MIB}
INT4_GROUP = 32
FP32 = 4


@dataclass(frozen=True)
class Footprint:
    parameters: int
    weight_bytes: dict[str, int]  # "fp32", "int8", "int4"
    context: int
    cache_bytes_per_token: int
    cache_fixed_bytes: int  # PSA's raw key (and query) per layer, independent of the context
    cache_bytes: int  # at ``context`` tokens, fixed state included
    decode_step_bytes: int  # one decode step's tensors at ``context`` tokens (upper bound)

    @property
    def ram_bytes(self) -> int:
        """KV cache at the context plus one decode step (the runtime's own memory not included)."""
        return self.cache_bytes + self.decode_step_bytes

    def fits(self) -> dict[str, bool]:
        """Which common budgets it fits: RAM (cache + one step) in each SRAM size, INT8 and INT4 weights
        in each flash size."""
        out = {name: self.ram_bytes <= size for name, size in SRAM_BUDGETS.items()}
        for name, size in FLASH_BUDGETS.items():
            out[f"INT8 weights in {name}"] = self.weight_bytes["int8"] <= size
            out[f"INT4 weights in {name}"] = self.weight_bytes["int4"] <= size
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ram_bytes": self.ram_bytes, "fits": self.fits()}


def weight_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Bytes of the model's weights at fp32, INT8 and INT4 (see the module docstring for the layouts)."""
    out = {"fp32": 0, "int8": 0, "int4": 0}
    for p in model.parameters():  # a tied weight is one parameter
        out["fp32"] += p.numel() * FP32
        if p.dim() < 2:
            out["int8"] += p.numel() * FP32
            out["int4"] += p.numel() * FP32
            continue
        rows, per_row = p.shape[0], p[0].numel()
        groups = -(-per_row // INT4_GROUP)  # a row's groups of 32 weights, the last one possibly short
        out["int8"] += p.numel() + rows * FP32
        out["int4"] += rows * (-(-per_row // 2)) + rows * groups * FP32
    return out


def cache_bytes(model: DecoderLM, context: int) -> tuple[int, int]:
    """(bytes per token, fixed bytes) of the fp32 KV cache of a batch of one."""
    per_token = fixed = 0
    for block in model.blocks:
        attn = block.attn
        if attn.key_lag is not None:
            raise ValueError(f"the key-lag baseline {attn.config.variant!r} has no cached decoding, so no KV cache to size")
        kv = attn.n_kv_heads * attn.head_dim * FP32
        per_token += 2 * kv  # sheared key and value
        fixed += (kv if attn.gamma_k != 0 else 0) + (attn.n_heads * attn.head_dim * FP32 if attn.gamma_q != 0 else 0)
    return per_token, fixed


def decode_step_bytes(model: DecoderLM, context: int) -> int:
    """Bytes of the fp32 tensors one decode step at ``context`` cached tokens creates, summed."""
    c = model.config
    per_layer = (2 * c.d_model  # residual and normalised input
                 + 3 * c.n_heads * c.head_dim  # q, k, v (k and v at most as wide as q)
                 + c.n_heads * (context + 1)  # scores over the cache and the new token
                 + c.n_heads * c.head_dim)  # attention output
    mlp = c.d_mlp * sum(c.layer_mlps())  # the MLP's hidden layer, where a block has one
    return FP32 * (per_layer * c.n_layers + mlp + c.d_model + c.vocab_size)


def footprint(model: DecoderLM, context: int) -> Footprint:
    if context < 1:
        raise ValueError(f"context must be at least 1 token, got {context}")
    per_token, fixed = cache_bytes(model, context)
    return Footprint(
        parameters=model.num_parameters(), weight_bytes=weight_bytes(model), context=context,
        cache_bytes_per_token=per_token, cache_fixed_bytes=fixed, cache_bytes=per_token * context + fixed,
        decode_step_bytes=decode_step_bytes(model, context),
    )


@torch.no_grad()
def measured_cache_bytes(model: DecoderLM, context: int) -> int:
    """Bytes of a real cache after a prefill of ``context`` tokens (batch of one): what it holds."""
    cache = model.new_cache()
    model.eval()(torch.randint(0, model.config.vocab_size, (1, context)), cache=cache)
    return cache.kv_bytes() + cache.extra_state_bytes()


def format_footprints(rows: dict[str, Footprint]) -> list[str]:
    """A markdown table, one row per model, then which budgets each fits."""
    def kb(n: int) -> str:
        return f"{n / KIB:,.1f}"
    context = next(iter(rows.values())).context
    lines = [f"| model | parameters | weights fp32 / INT8 / INT4 (KiB) | KV cache per token (B) | PSA fixed state (B) | "
             f"KV cache at {context} tokens (KiB) | one decode step (KiB) | RAM: cache + step (KiB) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        w = f.weight_bytes
        lines.append(f"| {name} | {f.parameters:,} | {kb(w['fp32'])} / {kb(w['int8'])} / {kb(w['int4'])} | "
                     f"{f.cache_bytes_per_token:,} | {f.cache_fixed_bytes:,} | {kb(f.cache_bytes)} | "
                     f"{kb(f.decode_step_bytes)} | {kb(f.ram_bytes)} |")
    lines.append("")
    for name, f in rows.items():
        fits = [budget for budget, ok in f.fits().items() if ok]
        lines.append(f"{name} fits: {', '.join(fits) if fits else 'none of the budgets'} "
                     "(the runtime's own memory not included)")
    return lines
