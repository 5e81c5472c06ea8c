"""Which attention modules of a transformers model PSA can patch, found by a dry run of the model.

PSA shears the post-RoPE queries and keys that attention sees (arXiv:2502.11922's lift, placed after
RoPE; see ``psattn.ops.shear``). Inside a transformers model that is exact when each attention module

1. applies rotary position embeddings to q and k (a module-level ``apply_*rotary*`` / ``apply_*rope*``
   function of its modeling file),
2. then calls the cache's ``update(k, v, layer_idx)`` once, with its own ``layer_idx``, on a dynamic
   attention layer of the cache (one that holds linear-attention state too cannot hold sheared keys),
3. then calls the registered attention function once, with itself as the module, the keys and values
   that ``update`` returned and the attention mask it received.

``find_attention`` checks this on the model itself: it runs one forward pass on a tiny left-padded input
(4 tokens, under ``no_grad`` in eval mode, RNG state kept) with the attention implementation routed
through a recording function, and records in each module call the rotary calls, the cache updates and
the attention calls in order. A model qualifies when every module that calls the attention function
follows the pattern and at least one of them applies rotary embeddings (layers without RoPE, as in
SmolLM3's NoPE layers, are sheared on their raw q and k). A model that does not is refused with a
one-line error naming what differs.

What the dry run also reports: partial rotary (only the first r of the head's D channels turn; the
shear acts on all D channels, rotated or not, as it acts on whatever q and k attention gets) and the
keyword arguments the module passes to the attention function beyond the usual ones (soft-capping,
sliding windows, sinks), which the base kernel handles as it does without PSA.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.modeling_utils import AttentionInterface

from psattn.integrations.hf.attention import eager_base
from psattn.integrations.hf.cache import can_hold_sheared_keys

ROPE_FUNCTION = re.compile(r"^apply_\w*(rotary|rope)\w*$")
# attention arguments that change what the base kernel computes; reported by ``AttentionPattern.describe``
NOTABLE_KWARGS = frozenset({"softcap", "sliding_window", "s_aux", "sinks", "position_bias"})


@dataclass
class AttentionPattern:
    """What the dry run found: the attention modules to patch and how they use rotary embeddings."""

    modules: list[nn.Module]
    rotary_channels: dict[int, int]  # layer_idx -> rotated channels per head (absent: no RoPE in that layer)
    head_dim: dict[int, int]  # layer_idx -> channels per query/key head
    extra_kwargs: set[str] = field(default_factory=set)

    def describe(self) -> str:
        """One line: how many layers, which channels turn, which extra attention arguments."""
        partial = sorted({(r, self.head_dim[i]) for i, r in self.rotary_channels.items() if r < self.head_dim[i]})
        nope = len(self.modules) - len(self.rotary_channels)
        parts = [f"{len(self.modules)} attention modules"]
        if partial:
            parts.append("partial rotary (" + ", ".join(f"{r} of {d} channels turn" for r, d in partial)
                         + "; the shear acts on all channels)")
        if nope:
            parts.append(f"{nope} without RoPE")
        if self.extra_kwargs:
            parts.append("attention arguments " + ", ".join(sorted(self.extra_kwargs)))
        return "; ".join(parts)


@dataclass
class _Call:
    """One forward call of one module, and what happened inside it."""

    module: nn.Module
    kwargs: dict[str, Any]
    # ("rope", channels, innermost module) | ("update", idx, k, v) | ("attend", ...)
    events: list[tuple] = field(default_factory=list)


class _Recorder:
    def __init__(self):
        self.stack: list[_Call] = []
        self.calls: list[_Call] = []
        self.caches: list[Cache] = []
        self.switched = False  # whether the model took the probe's attention implementation

    def enter(self, module, args, kwargs):
        call = _Call(module, kwargs)
        self.stack.append(call)
        self.calls.append(call)
        for value in (*args, *kwargs.values()):
            if isinstance(value, Cache) and all(value is not c for c in self.caches):
                self._watch(value)

    def leave(self, module, args, kwargs, output):
        if self.stack and self.stack[-1].module is module:
            self.stack.pop()

    def note(self, event: tuple) -> None:
        for call in self.stack:
            call.events.append(event)

    def _watch(self, cache: Cache) -> None:
        self.caches.append(cache)
        update = cache.update

        def recording_update(key_states, value_states, layer_idx, *args, **kwargs):
            keys, values = update(key_states, value_states, layer_idx, *args, **kwargs)
            self.note(("update", layer_idx, keys, values))
            return keys, values

        cache.update = recording_update  # type: ignore[method-assign]  # an instance attribute, deleted after the run

    def rope(self, fn: Callable) -> Callable:
        def recording_rope(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.note(("rope", _turned_channels(args, kwargs, out), self.stack[-1].module if self.stack else None))
            return out

        return recording_rope

    def attend(self, module, query, key, value, attention_mask, kwargs) -> None:
        notable = {k for k, v in kwargs.items() if k in NOTABLE_KWARGS and v is not None}
        event = ("attend", module, query, key, value, attention_mask, notable)
        for call in self.stack:
            if call.module is module:
                call.events.append(event)
                return
        self.note(event)


def _turned_channels(args, kwargs, out) -> int | None:
    """How many channels of the first rotated tensor the rotary function changed (None: unknown)."""
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
    rotated = out[0] if isinstance(out, tuple | list) else out
    if first is None or not isinstance(rotated, Tensor) or rotated.shape != first.shape:
        return None
    # (D,): channels that moved at some position (NaN at a padded position, as in Gemma 2's eager float64, counts as not)
    changed = ((rotated - first).abs() > 0).flatten(0, -2).any(0)
    return int(changed.sum())
_ACTIVE: list[_Recorder] = []


def _probe(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def probe(module, query, key, value, attention_mask, **kwargs):
        if _ACTIVE:
            _ACTIVE[-1].attend(module, query, key, value, attention_mask, kwargs)
        fn = base if base is not None else eager_base(module)
        return fn(module, query, key, value, attention_mask, **kwargs)

    return probe


def _register_probes() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bases: dict[str, tuple[Callable[..., Any] | None, Callable[..., Any]]] = {
        "sdpa": (sdpa_attention_forward, sdpa_mask), "eager": (None, eager_mask)}  # None: the model's own eager
    for name, (base, mask) in bases.items():
        AttentionInterface.register(f"psa_probe_{name}", _probe(base))
        AttentionMaskInterface.register(f"psa_probe_{name}", mask)


def _dry_input(model: Any) -> tuple[Tensor, Tensor]:
    """(1, 4) token ids that are no special token, and a mask with one left pad."""
    config = model.config
    text = config.get_text_config(decoder=True)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 8
    special = {v for c in (config, text) for k, v in vars(c).items()
               if isinstance(v, int) and (k.endswith("_token_id") or k.endswith("_token_index"))}
    ids = [i for i in range(1, vocab) if i not in special][:4]
    weight = getattr(model.get_input_embeddings(), "weight", None)  # MusicGen's: a list, one per codebook
    device = model.device if weight is None else weight.device
    return torch.tensor([ids], device=device), torch.tensor([[0, 1, 1, 1]], device=device)


@contextlib.contextmanager
def _uncompiled(model: Any) -> Iterator[Any]:
    """The module to run ``model`` eagerly through: the one inside ``torch.compile(model)`` (its ``_orig_mod``), or
    ``model``, its own compiled call (``model.compile()``) set aside for the block. The dry run runs eagerly, since
    through Dynamo it took seconds of tracing (the recording breaks the graph) and filled the compiled model's cache
    with graphs of the probe. The compiled model still sees the patched attention: its guards recompile it."""
    inner = getattr(model, "_orig_mod", None)
    module = inner if isinstance(inner, nn.Module) else model
    compiled = vars(module).get("_compiled_call_impl")
    module._compiled_call_impl = None
    try:
        yield module
    finally:
        module._compiled_call_impl = compiled


def _record(model: Any, base: str) -> _Recorder:
    recorder = _Recorder()
    patched: list[tuple[Any, str, Any]] = []  # (python module, name, original function)
    for pymod in {sys.modules.get(type(m).__module__) for m in model.modules()} - {None}:
        for name, fn in list(vars(pymod).items()):
            if ROPE_FUNCTION.match(name) and callable(fn) and not isinstance(fn, type):
                patched.append((pymod, name, fn))
                setattr(pymod, name, recorder.rope(fn))
    handles = [h for m in model.modules() for h in (
        m.register_forward_pre_hook(recorder.enter, with_kwargs=True),
        m.register_forward_hook(recorder.leave, with_kwargs=True, always_call=True))]
    modes = {m: m.training for m in model.modules()}
    original = model.config._attn_implementation
    ids, mask = _dry_input(model)
    devices = [ids.device] if ids.device.type == "cuda" else []
    _ACTIVE.append(recorder)
    try:
        model.set_attn_implementation(f"psa_probe_{base}")
        recorder.switched = model.config._attn_implementation == f"psa_probe_{base}"
        model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=devices), _uncompiled(model) as eager:
            eager(input_ids=ids, attention_mask=mask, use_cache=True)
    except Exception as err:  # noqa: BLE001  (any failure of the model's own forward is reported in one line)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise NotImplementedError(
            f"PSA could not check {type(model).__name__}: its forward pass on a 4-token input failed "
            f"({type(err).__name__}: {first[:200]})") from err
    finally:
        _ACTIVE.pop()
        for h in handles:
            h.remove()
        for pymod, name, fn in patched:
            setattr(pymod, name, fn)
        for cache in recorder.caches:
            vars(cache).pop("update", None)
        for m, training in modes.items():
            m.training = training
        model.set_attn_implementation(original or "sdpa")
    return recorder


def _check_call(call: _Call) -> str | None:
    """What differs from the pattern in one attention module call (None: it holds)."""
    module = call.module
    kind = type(module).__name__
    attends = [e for e in call.events if e[0] == "attend" and e[1] is module]
    if len(attends) != 1:
        return f"{kind} calls the attention function {len(attends)} times in one forward call (PSA needs once)"
    at = call.events.index(attends[0])
    _, _, query, key, value, mask, _ = attends[0]
    updates = [(i, e) for i, e in enumerate(call.events[:at]) if e[0] == "update"]
    if not updates:
        return (f"{kind} attends without calling past_key_values.update first (keys that are not cached, "
                "or cached elsewhere: PSA keeps sheared keys in the cache)")
    if len(updates) != 1:
        return f"{kind} calls past_key_values.update {len(updates)} times before attending (PSA needs once)"
    u, (_, layer_idx, keys, values) = updates[0]
    if getattr(module, "layer_idx", None) != layer_idx:
        return (f"{kind} updates cache layer {layer_idx} but has layer_idx={getattr(module, 'layer_idx', None)} "
                "(layers that share or borrow another layer's keys)")
    # the module's own RoPE call (one inside a submodule turns that submodule's keys, as DeepSeek-V3.2's indexer does)
    if any(e[0] == "rope" and e[2] is module for e in call.events[u + 1:at]):
        return f"{kind} applies rotary embeddings after past_key_values.update (the cache holds keys before RoPE)"
    if key is not keys or value is not values:
        return (f"{kind} attends with keys or values built after past_key_values.update from what it cached (as "
                "multi-latent attention expands a cached latent that keys and values share): PSA's cache cannot "
                "hold sheared keys for it exactly")
    if mask is not None and call.kwargs.get("attention_mask") is not mask:
        return f"{kind} attends with a mask other than the attention_mask it receives"
    layers = getattr(next((v for v in call.kwargs.values() if isinstance(v, Cache)), None), "layers", ())
    if layer_idx < len(layers) and not can_hold_sheared_keys(layers[layer_idx]):
        return (f"{kind} keeps its keys in a {type(layers[layer_idx]).__name__} cache layer, where PSA cannot store "
                "sheared keys (it stores them in dynamic attention layers only)")
    return None


def find_attention(model: Any, base: str) -> AttentionPattern:
    """The attention modules of ``model`` that PSA patches, checked by a dry run with the base kernel
    ``base`` (``sdpa`` or ``eager``); NotImplementedError with a one-line reason when the pattern fails."""
    name = type(model).__name__
    if any(p.device.type == "meta" for p in model.parameters()):
        raise NotImplementedError(f"apply_psa runs {name} once on a tiny input and needs its weights; they are on the "
                                  "meta device (load them first)")
    holds = [m for m in model.modules() if callable(getattr(m, "_setup_cache", None))]  # the model's own too
    stateful = sorted({type(m).__name__ for m in holds if not any(c in holds for c in list(m.modules())[1:])})
    if stateful:  # RecurrentGemma's recurrent blocks: their state is reset only when the model makes the cache itself
        raise NotImplementedError(
            f"PSA does not support {name}: {', '.join(stateful)} keeps its decoding state in the module, set up only "
            "when the model makes its own cache, so a generation with PSA's cache would continue a stale state")
    _register_probes()
    recorder = _record(model, base)
    first: dict[int, _Call] = {}
    for call in recorder.calls:
        for event in call.events:
            if event[0] == "attend" and event[1] is call.module and id(call.module) not in first:
                first[id(call.module)] = call
    if not first:
        raise NotImplementedError(
            f"{name} calls no registered transformers attention function (it attends with code of its own); PSA needs "
            "rotary position embeddings applied inside the attention module before the cache update and the "
            "registered attention function")
    calls = list(first.values())
    if not any(e[0] == "rope" for c in calls for e in c.events):
        kinds = sorted({type(c.module).__name__ for c in calls})
        raise NotImplementedError(
            f"PSA does not support {name}: {', '.join(kinds)} applies no rotary position embeddings (PSA needs rotary "
            "position embeddings applied inside the attention module before the cache update and the registered "
            "attention function)")
    for call in calls:
        reason = _check_call(call)
        if reason is not None:
            raise NotImplementedError(f"PSA does not support {name}: {reason}")
    # Dory's recurrent block runs once per loop, each time on its own cache layer; PSA patches a module for one
    looped: dict[nn.Module, set[int]] = {}
    for call in recorder.calls:
        if any(e[0] == "attend" and e[1] is call.module for e in call.events):
            looped.setdefault(call.module, set()).update(e[1] for e in call.events if e[0] == "update")
    for module, layers in looped.items():
        if len(layers) > 1:
            raise NotImplementedError(
                f"PSA does not support {name}: {type(module).__name__} runs more than once in one forward pass, on "
                f"cache layers {sorted(layers)} (a block looped over the layers): PSA patches each module for one layer")
    if not recorder.switched:  # GOT-OCR2, whose vision encoder cannot switch: apply_psa could not switch it to PSA's
        raise NotImplementedError(
            f"PSA does not support {name}: it keeps its attention implementation when set_attn_implementation is "
            "called, and PSA attends through one it registers")
    rotary: dict[int, int] = {}
    head_dim: dict[int, int] = {}
    extra: set[str] = set()
    for call in calls:
        attend = next(e for e in call.events if e[0] == "attend" and e[1] is call.module)
        layer = int(call.module.layer_idx)  # type: ignore[arg-type]  # checked by _check_call
        head_dim[layer] = attend[2].shape[-1]
        ropes = [e[1] for e in call.events[:call.events.index(attend)] if e[0] == "rope"]
        if ropes:
            rotary[layer] = max((r for r in ropes if r is not None), default=head_dim[layer])
        extra |= attend[6]
    return AttentionPattern([c.module for c in calls], rotary, head_dim, extra)
