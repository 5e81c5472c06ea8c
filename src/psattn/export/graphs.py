"""Exportable graphs of a DecoderLM: a full forward (prefill) and one cached decode step.

The cache state crosses the graph boundary as plain tensors, stacked over layers:

    keys, values   (L, B, Hkv, S, D)   sheared keys and values: grow by one token per step
    last_keys      (L, B, Hkv, 1, D)   raw key at the last position      (only when gamma_k != 0)
    last_queries   (L, B, Hq, 1, D)    raw query at the last position    (only when gamma_q != 0)

so the step's inputs and outputs grow with the sequence exactly as a plain KV cache does. The
graphs assume unpadded sequences (positions 0, 1, 2, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor, nn

from psattn.models.context import AttentionContext
from psattn.models.decoder import DecoderLM
from psattn.models.generate import NonFiniteLogits
from psattn.ops.cache import extend_kv


def check_token_ids(input_ids, vocab_size: int) -> np.ndarray:
    """``input_ids`` as the int64 array (B, T) an exported graph takes, or one ValueError line: the graphs
    themselves read a negative id as one counted from the end of the vocabulary (ONNX) or stop with an
    opaque runtime error, and would truncate fractional ids."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be a (batch, length) array of token ids, got shape {ids.shape}; "
                         "for one prompt pass input_ids[None]")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}) (the model's vocab_size), got ids from {ids.min()} "
                         f"to {ids.max()}")
    return ids.astype(np.int64)


def check_new_tokens(input_ids: np.ndarray, max_new_tokens: int) -> None:
    """ValueError unless greedy decoding can continue ``input_ids`` (B, T) by ``max_new_tokens``: a prompt of
    at least one token, and an integer count >= 0 (as ``psattn.models.generate`` asks: a count that is no
    integer is a TypeError)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise TypeError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt must hold at least one token")


def greedy_tokens(logits: np.ndarray) -> np.ndarray:
    """The greedy next tokens (B, 1) of an exported graph's last logits (B, V); NaN or infinite logits are
    ``NonFiniteLogits``, as in ``psattn.models.generate`` (argmax would pick an arbitrary token)."""
    if not np.isfinite(logits).all():
        raise NonFiniteLogits("the exported model gave NaN or infinite logits; its weights or activations "
                              "overflow, so no token can be chosen")
    return logits.argmax(-1)[:, None].astype(np.int64)  # (B, 1)


def check_exportable_dtype(model: DecoderLM, runtime: str, supported: tuple[torch.dtype, ...]) -> None:
    """ValueError unless ``model``'s weights are of a dtype ``runtime`` runs: an export of another would be
    written and then fail inside the runtime."""
    dtype = next(model.parameters()).dtype
    if dtype not in supported:
        names = " or ".join(str(d).removeprefix("torch.") for d in supported)
        raise ValueError(f"{runtime} runs these graphs in {names}, not {str(dtype).removeprefix('torch.')}: export "
                         "model.float() (quantize with the export's own options)")


def example_prompt(model: DecoderLM, shape: tuple[int, int]) -> Tensor:
    """Token ids (B, T) to trace the graphs with, drawn from a generator of their own: an export leaves
    PyTorch's global random state as it found it."""
    return torch.randint(0, model.config.vocab_size, shape, generator=torch.Generator(device="cpu").manual_seed(0),
                         device="cpu")  # (B, T), on the CPU the graphs are traced on, whatever the default device


@contextlib.contextmanager
def kept_modes(model: nn.Module) -> Iterator[None]:
    """Give every submodule of ``model`` back the train / eval mode it had before the block."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def check_exportable(model: DecoderLM) -> tuple[bool, bool]:
    """(keeps last raw keys, keeps last raw queries); raises ValueError for what cannot export."""
    configs = model.config.layer_attention_configs()
    if any(a.is_key_lag for a in configs):
        raise ValueError("the key-lag baselines keep no PSA cache and cannot be exported with a decode step")
    if any(a != configs[0] for a in configs):
        raise ValueError("export needs the same attention config in every layer")
    gamma_q, gamma_k = configs[0].gammas
    return gamma_k != 0.0, gamma_q != 0.0


class _TensorLayerCache:
    """The part of LayerCache's interface the attention layer uses, over given tensors."""

    def __init__(self, keys: Tensor | None, values: Tensor | None, last_k: Tensor | None, last_q: Tensor | None):
        self.keys, self.values, self.last_k, self.last_q = keys, values, last_k, last_q

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def last_raw(self):
        return self.last_q, self.last_k

    def append(self, k_hat: Tensor, v: Tensor, raw_k: Tensor | None = None, raw_q: Tensor | None = None):
        self.keys, self.values = extend_kv(self.keys, self.values, k_hat, v)  # (B, Hkv, S + T, D)
        self.last_k = None if raw_k is None else raw_k[:, :, -1:]  # None: a stream without a shear
        self.last_q = None if raw_q is None else raw_q[:, :, -1:]
        return self.keys, self.values


def _stack(per_layer: list[Tensor | None]) -> Tensor:
    """One tensor per layer, each set by the forward pass, stacked: (L, ...)."""
    present = [x for x in per_layer if x is not None]
    assert len(present) == len(per_layer)
    return torch.stack(present)


class _CachedGraph(nn.Module):
    def __init__(self, model: DecoderLM):
        super().__init__()
        self.model = model.eval()
        self.keep_k, self.keep_q = check_exportable(model)

    def _run(self, input_ids: Tensor, context: AttentionContext, caches: list[_TensorLayerCache]):
        m = self.model
        h = m.embed(input_ids)  # (B, T, C)
        for block, cache in zip(m.blocks, caches, strict=True):
            h = block(h, context, cache)
        outputs = [m.lm_head(m.norm_final(h)), _stack([c.keys for c in caches]), _stack([c.values for c in caches])]
        if self.keep_k:
            outputs.append(_stack([c.last_k for c in caches]))
        if self.keep_q:
            outputs.append(_stack([c.last_q for c in caches]))
        return tuple(outputs)

    def output_names(self) -> list[str]:
        return ["logits", "keys", "values"] + ["last_keys"] * self.keep_k + ["last_queries"] * self.keep_q


class PrefillGraph(_CachedGraph):
    """input_ids (B, T) -> logits (B, T, V) and the cache state after the prompt."""

    def forward(self, input_ids: Tensor):
        """input_ids (B, T) -> logits (B, T, V), keys, values and PSA's last raw key (and query)."""
        B, T = input_ids.shape
        context = AttentionContext.causal(B, T, input_ids.device)
        caches = [_TensorLayerCache(None, None, None, None) for _ in self.model.blocks]
        return self._run(input_ids, context, caches)

    def input_names(self) -> list[str]:
        """The graph's input names, as exported."""
        return ["input_ids"]


class DecodeStepGraph(_CachedGraph):
    """One token (B, 1) after S cached ones -> logits (B, 1, V) and the cache state grown by one."""

    def forward(self, input_ids: Tensor, keys: Tensor, values: Tensor, *last: Tensor):
        """One token (B, 1) and the cache state -> its logits (B, 1, V) and the state grown by one."""
        B = input_ids.shape[0]
        S = keys.shape[3]
        rest = list(last)
        last_k = rest.pop(0) if self.keep_k else None
        last_q = rest.pop(0) if self.keep_q else None
        positions = torch.arange(S, S + 1, device=input_ids.device).expand(B, 1)  # (B, 1)
        context = AttentionContext(positions, None, None, False)  # one query sees every cached key
        caches = [_TensorLayerCache(keys[i], values[i], None if last_k is None else last_k[i],
                                    None if last_q is None else last_q[i]) for i in range(len(self.model.blocks))]
        return self._run(input_ids, context, caches)

    def input_names(self) -> list[str]:
        """The graph's input names, as exported: the token, then the cache state in output order."""
        return ["input_ids", "past_keys", "past_values"] + ["past_last_keys"] * self.keep_k + \
            ["past_last_queries"] * self.keep_q
