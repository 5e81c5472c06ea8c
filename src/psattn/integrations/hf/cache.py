"""A transformers ``DynamicCache`` layer that stores sheared keys k̂ instead of raw keys k.

In the Llama family the attention module applies RoPE, then calls ``cache.update(k, v, layer_idx)``,
then hands the returned keys to the attention function. ``PSALayer.update`` shears the chunk's keys
(``PSALayer.shear``),

    k̂_j = (1 + gamma_k) k_j - gamma_k k_{j-1}     (k_{j-1} := k_j at sequence starts),

appends k̂ and returns every key. When a hook point of the module is listened to, the keys must reach
the hooks raw first: ``update`` then appends the chunk raw, and the PSA attention function passes it
through the hook points, shears it and writes k̂ and the values back over it (``PSALayer.store``), the
same steps, in the same order, as psattn's own layer with its cache. No cached key is ever recomputed. The extra state is a
short window of *raw* stream values: the last raw key (and the last raw query when gamma_q != 0),
i.e. O(1) in the sequence length. The shearing, the raw windows and the rollback rule are
``psattn.ops.shear_state.ShearState``'s, as in the library's own cache; ``PSALayer`` stores.

Rolling back. ``crop`` (assisted / speculative decoding) to length n needs the raw key at n - 1.
``crop`` keeps transformers' convention (``crop(-m)`` removes m tokens, ``crop(0)`` only shrinks the
windows) and hands the resulting length to ``ShearState.crop``. The window also holds the raw
values of the last forward call's tokens, which existed during that call anyway and are dropped by
the next ``update`` or by ``crop``; so any crop within the last call is exact. ``max_rollback = r``
keeps r more positions (a PSA *assistant* model is cropped across several of its own calls), and
``activate_past_recording`` keeps everything until the next ``crop``, as transformers'
sliding-window layers do. A crop beyond the window raises a ValueError and changes nothing, in any layer:
``PSADynamicCache.crop`` checks every layer before it crops one, and so does the first PSA layer of a cache that
stays a plain ``DynamicCache`` (a compiled forward fills one: Dynamo cannot change its class).
``keep_last_call=False`` keeps only the last ``max_rollback + 1`` positions at all times: O(1)
right after a long prefill as well, for models that are never cropped further back than that.

Sliding-window layers. A transformers ``DynamicSlidingWindowLayer`` becomes a ``PSASlidingWindowLayer``, which
keeps the last ``sliding_window - 1`` sheared keys as transformers keeps raw ones: ``k̂_j`` is fixed once written, so
dropping the keys the sliding mask hides is exact. A crop there also needs the keys the window shows after it, so
past the window it goes back ``max_rollback`` tokens only (unless ``record_past``), and the layer keeps no raw values
of the last call beyond those: after a long prompt it holds ``max_rollback + 1`` raw rows, not the prompt's.

The attention pre-hook (``.patch``) calls ``PSALayer.prepare`` right before the module calls
``update``; an ``update`` that was not prepared (the cache used by a model without PSA) raises
instead of storing wrong keys.
"""

from __future__ import annotations

import copy
import weakref
from functools import partial
from typing import Any

import torch
from torch import Tensor
from transformers import PretrainedConfig
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from psattn.integrations.hf.spec import PSASpec
from psattn.ops.shear_state import ShearState, Stream, owned, tensor_bytes


class PSALayer(DynamicLayer):
    """One layer's cache: sheared keys (B, Hkv, S, D) and values (B, Hkv, S, Dv), beside the
    ``ShearState`` that shears each new chunk and holds the raw values a crop needs."""

    is_croppable = True

    def __init__(self, max_rollback: int = 0, keep_last_call: bool = True, **kwargs):
        super().__init__()
        self.shear_state = ShearState(max_rollback, keep_last_call)
        self.spec: PSASpec | None = None
        self._prepared = False  # a PSA forward pass announced the chunk the next update brings
        self._shear_in_update: tuple[Tensor | None] | None = None  # (starts,) when update shears the keys itself
        self._position = 0  # where the last chunk given to update begins
        self._pending = 0  # tokens of the last chunk still raw in the cache: update appended, store not yet
        self.chunk_sheared = False  # the last update stored its chunk's keys sheared (nothing left to store)
        self.cache: weakref.ref[DynamicCache] | None = None  # set where the cache stays a plain DynamicCache (compiled)

    def __getstate__(self) -> dict[str, Any]:
        """The layer's state for pickle, without the reference to its cache (a weak one)."""
        return {**vars(self), "cache": None}

    def __deepcopy__(self, memo: dict[int, Any]) -> PSALayer:
        """A deep copy; one made with its cache (``copy.deepcopy(cache)``) refers to the copy of the cache."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        vars(new).update(copy.deepcopy(self.__getstate__(), memo))
        owner = None if self.cache is None else self.cache()
        if owner is not None and id(owner) in memo:  # the cache's copy, made before its layers are copied
            new.cache = weakref.ref(memo[id(owner)])
        return new

    def __repr__(self) -> str:
        spec = "unused" if self.spec is None else f"gamma_q={self.spec.gamma_q:g}, gamma_k={self.spec.gamma_k:g}"
        return f"{type(self).__name__}({spec}, length={self.get_seq_length()})"

    @property
    def record_past(self) -> bool:
        """Whether every raw value is held until the next ``crop`` (transformers sets and clears it)."""
        return self.shear_state.record_past

    @record_past.setter
    def record_past(self, value: bool) -> None:
        self.shear_state.record_past = value

    def activate_past_recording(self, **kwargs: Any) -> None:
        """Keep every raw value until the next ``crop`` (transformers calls this before a rollback; its
        keywords, such as ``recurrent_states_to_keep``, are for linear-attention layers)."""
        self.record_past = True

    def prepare(self, spec: PSASpec, shear_in_update: bool = False, starts: Tensor | None = None) -> None:
        """Announce the next chunk, to be sheared under ``spec``. With ``shear_in_update`` (no hook point
        stands between the rotation and the cache), ``update`` shears the chunk's keys (sequence starts
        ``starts`` (B, T), None: none) and stores k̂ at once, and the attention function only shears the queries."""
        if self.spec is not None and self.get_seq_length() > 0 and self.spec.shear_key() != spec.shear_key():
            raise RuntimeError(
                f"this cache layer holds keys sheared with (gamma_q, gamma_k, boundary) = {self.spec.shear_key()}, "
                f"but the model asks for {spec.shear_key()}; use one cache per PSA model"
            )
        self.spec, self._prepared = spec, True
        self._shear_in_update = (starts,) if shear_in_update else None

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        """Append the chunk's raw keys (B, Hkv, T, D) and values; return all keys and values (B, Hkv, S, D).
        Prepared with ``shear_in_update``, the chunk's keys are sheared as they are appended; otherwise they
        are returned raw, and the attention function shears them (``shear``) and writes them back
        (``store``), so that the hook points in between see what they see in psattn's own layer."""
        if not self._prepared:
            raise RuntimeError(
                "PSALayer.update was called outside a PSA forward pass: this cache stores sheared keys and only "
                "works with a model patched by psattn.integrations.hf.apply_psa"
            )
        if self._pending:
            raise RuntimeError("the last chunk given to this PSALayer was never stored (its forward pass failed); "
                               "start a fresh cache")
        self._prepared, self._position = False, self.get_seq_length()
        sheared, self._shear_in_update = self._shear_in_update, None
        self.chunk_sheared = sheared is not None
        if sheared is not None:
            key_states = self.shear("k", key_states, sheared[0])
        else:
            self._pending = key_states.shape[-2]
        return super().update(key_states, value_states)

    def shear(self, stream: Stream, x: Tensor, starts: Tensor | None) -> Tensor:
        """Shear the chunk's raw queries or keys x (B, H, T, D), continuing the held stream, with the chunk's
        (B, T) sequence starts (None: none); called by the attention function between ``update`` and ``store``."""
        spec = self.spec
        assert spec is not None  # set by prepare, before update
        gamma = spec.gamma_q if stream == "q" else spec.gamma_k
        return self.shear_state.shear(stream, x, gamma, self._position, starts=starts, boundary=spec.boundary)

    def store(self, k_hat: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the chunk's sheared keys k̂ (B, Hkv, T, D) and its values over the raw ones ``update``
        appended; return all keys and values (B, Hkv, S, D)."""
        T, self._pending = self._pending, 0
        if k_hat.shape[-2] != T:
            raise RuntimeError(f"PSALayer.store got {k_hat.shape[-2]} keys for a chunk of {T}")
        assert self.keys is not None and self.values is not None  # update appended the chunk
        self.keys[..., -T:, :] = k_hat  # the tensor update made for this chunk: no earlier one changes
        stored = self.values[..., -T:, :]
        if (v.data_ptr(), v.stride()) != (stored.data_ptr(), stored.stride()):  # a hook replaced the values
            stored.copy_(v)
        return self.keys, self.values

    def check_crop(self, tokens_to_remove: int) -> None:
        """Raise a ValueError, changing nothing, unless ``crop(tokens_to_remove)`` can be done."""
        _check_removal(tokens_to_remove)
        if self.is_initialized:
            now = self.get_seq_length()
            self.shear_state.check_crop(max(now + tokens_to_remove, 0), now)

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' convention: remove ``-tokens_to_remove`` tokens (a negative int; 0 only shrinks
        the raw windows back to their working size). The rollback itself is ``ShearState.crop``."""
        _check_removal(tokens_to_remove)
        self._check_every_layer(tokens_to_remove)
        if not self.is_initialized:
            return
        now = self.get_seq_length()
        length = max(now + tokens_to_remove, 0)
        self.shear_state.crop(length, now)
        super().crop(length - now)

    def _check_every_layer(self, tokens_to_remove: int) -> None:
        """In a plain ``DynamicCache`` (one a compiled forward filled: Dynamo cannot turn it into a
        ``PSADynamicCache``), transformers' ``crop`` crops layer after layer; its first PSA layer checks every PSA
        layer before any is cropped, as ``PSADynamicCache.crop`` does, so a refused crop changes no layer there either."""
        cache = None if self.cache is None else self.cache()
        if cache is None or isinstance(cache, PSADynamicCache):
            return
        layers = [layer for layer in cache.layers if isinstance(layer, PSALayer)]
        if layers and layers[0] is self:
            for layer in layers:
                layer.check_crop(tokens_to_remove)

    def reset(self) -> None:
        """Empty the layer, raw windows included: it takes keys sheared under any settings again."""
        super().reset()
        self.shear_state.clear()
        self._pending, self._position, self.chunk_sheared = 0, 0, False
        self.spec, self._prepared, self._shear_in_update = None, False, None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder the batch (beam search), raw windows included."""
        super().reorder_cache(beam_idx)
        self.shear_state.apply(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat each row ``repeats`` times, raw windows included."""
        super().batch_repeat_interleave(repeats)
        self.shear_state.apply(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: Tensor) -> None:
        """Keep the rows ``indices``, raw windows included."""
        super().batch_select_indices(indices)
        self.shear_state.apply(lambda x: x[indices, ...])

    def extra_state_bytes(self) -> int:
        """Bytes held beyond the KV tensors (the raw windows)."""
        return self.shear_state.extra_state_bytes()


class PSASlidingWindowLayer(PSALayer):
    """A sliding-window layer's cache, as transformers' ``DynamicSlidingWindowLayer`` keeps one: attention sees
    the kept keys and the chunk's, and afterwards only the last ``sliding_window - 1 + max_rollback`` sheared keys
    and values are kept (every one until the next ``crop`` while ``record_past``). The mask hides the older
    keys, and a stored ``k̂_j = (1 + gamma_k) k_j - gamma_k k_{j-1}`` never changes, so dropping them is exact.
    ``get_seq_length`` counts every token seen (the position the next chunk starts at).

    A crop needs the keys the window shows after it: within what is kept (the last call's keys too while
    ``record_past``, which transformers sets before a generation that rolls back); beyond, it raises a
    ValueError and changes nothing."""

    is_sliding = True

    def __init__(self, sliding_window: int, max_rollback: int = 0, keep_last_call: bool = True, **kwargs):
        super().__init__(max_rollback, keep_last_call)
        self.keep_last_call = keep_last_call  # the shear state keeps the last call only while a crop can use it (``shear``)
        self.sliding_window = sliding_window
        self.cumulative_length = 0  # tokens seen; the cache holds the last keys.shape[-2] of them
        self._sliding_window_tensor = torch.tensor(sliding_window, dtype=torch.long)  # read by DynamicCache.__iter__

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        """``PSALayer``'s, and the window's size moved to the keys' device (as transformers' layer does)."""
        super().lazy_initialization(key_states, value_states)
        self._sliding_window_tensor = self._sliding_window_tensor.to(self.device)

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        """``PSALayer.update``; returns the keys and values the chunk's mask covers (at most W - 1 + T of them),
        and keeps the window once the chunk's keys are sheared (here, or in ``store``)."""
        keys, values = super().update(key_states, value_states)  # (B, Hkv, kept + T, D)
        self.cumulative_length += key_states.shape[-2]
        return self._slide(keys, values, key_states.shape[-2], keep=not self._pending)

    def shear(self, stream: Stream, x: Tensor, starts: Tensor | None) -> Tensor:
        """``PSALayer.shear``. Once more tokens have been seen than the layer keeps keys of, a crop can go back
        ``max_rollback`` tokens only (a deeper one needs keys that were dropped), so the raw values of the rest
        of the last call are not kept either: after a long prompt the layer holds the last ``max_rollback + 1``
        raw rows, not the prompt's."""
        self.shear_state.keep_last_call = self.keep_last_call and self._position + x.shape[-2] <= self._kept
        return super().shear(stream, x, starts)

    def store(self, k_hat: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """``PSALayer.store``; returns what the chunk's mask covers, and keeps the window."""
        keys, values = super().store(k_hat, v)
        return self._slide(keys, values, k_hat.shape[-2], keep=True)

    def _slide(self, keys: Tensor, values: Tensor, T: int, keep: bool) -> tuple[Tensor, Tensor]:
        """The last W - 1 + T keys and values (what ``get_mask_sizes`` told the mask, T the chunk's length);
        with ``keep``, hold only the last W - 1 + max_rollback of them (all of them while ``record_past``)."""
        if keep and not self.record_past:
            kept = self._kept
            self.keys, self.values = owned(keys[..., -kept:, :]), owned(values[..., -kept:, :])  # (B, Hkv, <= kept, D)
        visible = self.sliding_window - 1 + T
        return keys[..., -visible:, :], values[..., -visible:, :]

    @property
    def _kept(self) -> int:
        """How many keys the layer keeps between calls: the window's W - 1 and max_rollback more."""
        return self.sliding_window - 1 + self.shear_state.max_rollback

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv_length, kv_offset) of the next chunk's mask: the keys it sees and the position of the first."""
        kv_offset = max(self.cumulative_length - self.sliding_window + 1, 0)
        return min(self.cumulative_length, self.sliding_window - 1) + query_length, kv_offset

    def get_seq_length(self) -> int:
        """Tokens seen (kept or not)."""
        return self.cumulative_length

    def get_max_length(self) -> int:
        """The window (what transformers' sliding-window layer reports)."""
        return self.sliding_window

    def check_crop(self, tokens_to_remove: int) -> None:
        """``PSALayer.check_crop``, and the keys the window shows after the crop must still be kept."""
        _check_removal(tokens_to_remove)
        if not self.is_initialized:
            return
        assert self.keys is not None
        now, held = self.cumulative_length, self.keys.shape[-2]  # the keys of positions [now - held, now)
        length = max(now + tokens_to_remove, 0)
        first = max(length - self.sliding_window + 1, 0)  # the first key the window shows after the crop
        if length and first < now - held:
            raise ValueError(
                f"cannot roll back {now - length} tokens (to {length}): this sliding-window layer keeps the keys of "
                f"positions >= {now - held} only, and its window then needs those from {first}; call "
                "activate_past_recording() before the calls to roll back, or build the cache with a larger max_rollback"
            )
        super().check_crop(tokens_to_remove)

    def crop(self, tokens_to_remove: int) -> None:
        """``PSALayer.crop``; the keys the window shows after the crop must still be kept (else a ValueError,
        changing nothing), and afterwards only the working window is."""
        self._check_every_layer(tokens_to_remove)
        self.check_crop(tokens_to_remove)
        if not self.is_initialized:
            return
        assert self.keys is not None and self.values is not None
        now, held = self.cumulative_length, self.keys.shape[-2]  # the keys of positions [now - held, now)
        length = max(now + tokens_to_remove, 0)
        self.shear_state.crop(length, now)
        hi = max(length, now - held) - (now - held)  # indices into the kept keys; empty when cropped to 0
        lo = min(max(length - self._kept, now - held) - (now - held), hi)
        self.keys, self.values = owned(self.keys[..., lo:hi, :]), owned(self.values[..., lo:hi, :])  # (B, Hkv, <= kept, D)
        self.cumulative_length = length


def _check_removal(tokens_to_remove: int) -> None:
    """A ValueError unless ``tokens_to_remove`` follows transformers' convention for ``crop`` (<= 0)."""
    if tokens_to_remove > 0:
        raise ValueError(f"crop takes the negative number of tokens to remove, as transformers' cache layers "
                         f"do, got {tokens_to_remove}")


_CONVERTIBLE = (DynamicLayer, DynamicSlidingWindowLayer)


def can_hold_sheared_keys(layer) -> bool:
    """Whether a transformers cache layer is, or becomes, a ``PSALayer`` (dynamic attention layers only)."""
    return isinstance(layer, PSALayer) or type(layer) in _CONVERTIBLE


class PSADynamicCache(DynamicCache):
    """A ``DynamicCache`` whose attention layers are ``PSALayer`` (``PSASlidingWindowLayer`` where the model's
    layer slides a window). ``generate`` does not need it (a patched model converts the ``DynamicCache`` it creates,
    and its empty layers, into one; a compiled forward pass called directly converts only the layers of the one it
    creates), but it can be passed as ``cache=`` / ``past_key_values=`` to set ``max_rollback`` or to inspect the state."""

    def __init__(self, config=None, *, max_rollback: int = 0, keep_last_call: bool = True):
        if config is not None and not isinstance(config, PretrainedConfig):
            raise TypeError(f"PSADynamicCache's config must be a transformers PretrainedConfig (model.config) or None, "
                            f"got {type(config).__name__}")
        ShearState(max_rollback, keep_last_call)  # checks both now, not as the first forward pass adds a layer
        super().__init__(config=config)
        window: dict[str, Any] = dict(max_rollback=max_rollback, keep_last_call=keep_last_call)
        # the attention layers store sheared keys; a hybrid model's linear-attention layers stay as they are
        self.layers = [_as_psa_layer(layer, window, i) if type(layer) in _CONVERTIBLE else layer
                       for i, layer in enumerate(self.layers)]
        if self.layer_class_to_replicate is not None:
            self.layer_class_to_replicate = partial(PSALayer, **window)  # type: ignore[assignment]  # called, never subclassed

    def crop(self, tokens_to_remove: int) -> None:
        """``DynamicCache.crop``, all or nothing: every PSA layer is checked before any is cropped (a full-attention
        layer can go back further than a sliding-window layer after it), so a refused crop changes no layer."""
        for layer in self.layers:
            if isinstance(layer, PSALayer):
                layer.check_crop(tokens_to_remove)
        super().crop(tokens_to_remove)

    def kv_bytes(self) -> int:
        """Bytes of every layer's cached keys and values."""
        return sum(tensor_bytes(layer.keys) + tensor_bytes(layer.values) for layer in self.layers
                   if isinstance(layer, CacheLayerMixin) and layer.is_initialized)

    def extra_state_bytes(self) -> int:
        """Bytes every layer holds beyond its KV tensors (the raw windows)."""
        return sum(layer.extra_state_bytes() for layer in self.layers if isinstance(layer, PSALayer))


def _as_psa_layer(layer, window: dict, index: int) -> PSALayer:
    """``layer`` as a ``PSALayer`` (``window``: its max_rollback and keep_last_call); a sliding-window layer
    becomes a ``PSASlidingWindowLayer`` of the same window."""
    if isinstance(layer, PSALayer):
        return layer
    if type(layer) in _CONVERTIBLE and layer.get_seq_length() == 0:
        new = PSASlidingWindowLayer(layer.sliding_window, **window) if type(layer) is DynamicSlidingWindowLayer \
            else PSALayer(**window)
        new.record_past = bool(getattr(layer, "record_past", False))
        return new
    if type(layer) in _CONVERTIBLE:
        raise RuntimeError(
            f"cache layer {index} already holds {layer.get_seq_length()} raw (unsheared) keys from a forward pass "
            "without PSA; start a fresh cache for the PSA model"
        )
    raise TypeError(
        f"PSA cannot use cache layer {index} of type {type(layer).__name__}: only dynamic attention layers can "
        "store sheared keys (static, quantized and linear-attention layers are not supported)"
    )


# what to use instead ("dynamic" also overrides a generation config that names another cache)
_INSTEAD = ('use the dynamic cache (generate(..., cache_implementation="dynamic"), the default) '
            'or pass PSADynamicCache(model.config)')


def check_cache(cache: object) -> DynamicCache:
    """``cache``, if it is a ``DynamicCache`` that keeps its layers on their device (one whose layers can store
    sheared keys), else a TypeError; a patched model checks its cache as a forward pass begins, before any work."""
    if not isinstance(cache, DynamicCache):
        raise TypeError(f"PSA cannot use a {type(cache).__name__}: static, quantized and encoder-decoder caches store raw "
                        f"keys; {_INSTEAD} (torch.compile takes those too)")
    if getattr(cache, "offloading", False):  # double quotes only: Dynamo shows the message in a repr, escaping single ones
        raise TypeError(f'PSA cannot use an offloaded cache (cache_implementation="offloaded", DynamicCache(offloading=True)); '
                        f"{_INSTEAD}")
    return cache


def refuse_paged_cache(*args, **kwargs):
    """Continuous batching (``generate(..., cache_implementation="paged")``, ``generate_batch``,
    ``init_continuous_batching``) on a patched model: a TypeError naming the cache to use, before transformers
    switches the model's attention or fills a cache (``apply_psa`` puts it in the model's
    ``init_continuous_batching``, where every way in begins)."""
    raise TypeError('PSA cannot use a paged cache (continuous batching: cache_implementation="paged", generate_batch): '
                    f"its paged attention kernels read raw keys; {_INSTEAD}")


def prepare_generation_cache(model, *args, **kwargs) -> Any:
    """``generate``'s cache preparation on a patched model (``apply_psa`` puts it in the model's
    ``_prepare_cache_for_generation``): transformers' own, then the cache it made or was given is checked
    (``check_cache``) and a plain ``DynamicCache`` becomes a ``PSADynamicCache``, both before the first forward pass.
    So a model compiled whole (``model.compile(fullgraph=True)``) refuses a static or offloaded cache in PSA's one
    line rather than in Dynamo's error, and its ``generate`` returns a ``PSADynamicCache`` (Dynamo, which traces the
    forward pass, cannot change a cache's class there)."""
    result = type(model)._prepare_cache_for_generation(model, *args, **kwargs)
    for model_kwargs in (*args, *kwargs.values()):
        if not isinstance(model_kwargs, dict):
            continue
        for name in ("cache", "past_key_values"):  # transformers 5.24 renamed past_key_values to cache
            cache = model_kwargs.get(name)
            if isinstance(cache, Cache):
                check_cache(cache)
                if type(cache) is DynamicCache:
                    cache.__class__ = PSADynamicCache  # the same attributes, as psa_layer does
    return result


def psa_layer(cache: Cache, layer_idx: int, spec: PSASpec) -> PSALayer:
    """The ``PSALayer`` of ``cache`` for ``layer_idx``, converting an empty ``DynamicCache`` layer
    in place (that is how ``generate``'s default cache becomes a PSA cache). Raises a TypeError for
    cache types that cannot store sheared keys."""
    layers = getattr(cache, "layers", ())
    if layer_idx < len(layers) and isinstance(layers[layer_idx], PSALayer):  # converted by an earlier call
        return layers[layer_idx]
    cache = check_cache(cache)
    if type(cache) is DynamicCache and not torch.compiler.is_compiling():  # Dynamo cannot trace a class change
        cache.__class__ = PSADynamicCache  # the same attributes; its crop checks every layer before it crops one
    # where it stays a DynamicCache, each new PSA layer knows it, to check every layer before a crop
    owner = weakref.ref(cache) if type(cache) is DynamicCache else None
    window: dict[str, Any]
    if isinstance(cache.layer_class_to_replicate, partial) and cache.layer_class_to_replicate.func is PSALayer:
        window = dict(cache.layer_class_to_replicate.keywords)  # a PSADynamicCache's own max_rollback and keep_last_call
    else:
        window = dict(max_rollback=spec.max_rollback, keep_last_call=spec.keep_last_call)
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = partial(PSALayer, **window)  # type: ignore[assignment]  # called, never subclassed
    while len(cache.layers) <= layer_idx:
        new = PSALayer(**window)
        new.cache = owner
        cache.layers.append(new)
    layer = cache.layers[layer_idx]
    if not isinstance(layer, PSALayer):
        layer = cache.layers[layer_idx] = _as_psa_layer(layer, window, layer_idx)
        layer.cache = owner
    return layer
