"""Turn PSA on and off in a transformers model: ``apply_psa``, ``remove_psa``, ``load_psa_model``.

No transformers code is replaced: ``apply_psa`` uses three extension points (and, to carry the
settings, turns the model's own config copy into a ``psattn_<base>`` config; see ``.saving``):

1. transformers' attention-function registry: ``model.set_attn_implementation("psa_sdpa")`` routes every
   attention module to ``psa_sdpa`` (masks come from the matching registered builder);
2. its cache classes: ``PSALayer`` is a ``DynamicLayer`` that shears keys in ``update``;
3. a torch forward pre-hook on each attention module, which reads what the module receives
   (``position_ids``, the 4D mask, the cache), works out the chunk's sequence starts, converts the
   empty layers of the ``DynamicCache`` that ``generate`` creates into PSA layers, and passes the
   per-model settings down to the attention function as the ``psa_step`` keyword argument.

The model's own ``init_continuous_batching``, where continuous batching begins (``cache_implementation="paged"``,
``generate_batch``), refuses it (``.cache.refuse_paged_cache``): transformers would otherwise switch the model's
attention to one of its paged kernels, which attend over raw keys. Its ``_prepare_cache_for_generation`` checks the
cache ``generate`` makes or is given before the first forward pass (``.cache.prepare_generation_cache``), outside
any compiled code, and its ``_prepare_position_ids_for_generation`` the mask ``generate`` counts positions with
(``.starts.prepare_generation_positions``).

``remove_psa`` removes the hooks, that refusal and those checks, and restores the original attention implementation.

The settings travel with the model: ``apply_psa`` turns ``model.config`` into a ``psattn_<base>``
config that carries them (see ``.saving``), so ``save_pretrained`` writes them and
``AutoModelForCausalLM.from_pretrained`` / ``load_psa_model`` rebuild the same model.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache

from psattn.integrations.hf.attention import PSAStep, implementation_name, register_attention
from psattn.integrations.hf.auto import plain_model_class, psa_model_class, register_auto_classes, register_on_look_up
from psattn.integrations.hf.cache import check_cache, prepare_generation_cache, psa_layer, refuse_paged_cache
from psattn.integrations.hf.decoder_model import PsattnConfig
from psattn.integrations.hf.detect import find_attention
from psattn.integrations.hf.hooks import add_hook_points, listened, remove_hook_points
from psattn.integrations.hf.saving import PREFIX, base_model_type, mark_config, saved_spec, unmark_config
from psattn.integrations.hf.spec import BASES, PSASpec, PSAVariant
from psattn.integrations.hf.starts import StartsMemo, prepare_generation_positions
from psattn.integrations.hf.support import TESTED
from psattn.ops.shear import Boundary
from psattn.ops.variants import Placement

log = logging.getLogger(__name__)

# The model types whose tiny random models the tests check (see ``.support``); registered with the Auto
# classes at import (each when transformers first looks it up: ``.auto.register_on_look_up``) so that a saved
# PSA model of these types loads in a new process. Any other model type that passes the dry run of
# ``.detect`` works too and is registered when ``apply_psa`` patches it.
SUPPORTED: tuple[str, ...] = TESTED


# the steps of transformers' generate a patched model runs checked, each before the first forward pass: the
# cache it makes or is given (``.cache``), and the attention mask it counts positions with (``.starts``)
_GENERATION_STEPS = {"_prepare_cache_for_generation": prepare_generation_cache,
                     "_prepare_position_ids_for_generation": prepare_generation_positions}


@dataclass
class _PSAState:
    spec: PSASpec  # replaced (never mutated) by set_psa_gamma; the hooks read it at every call
    base: str
    original_implementation: str | None
    original_config_class: type[PretrainedConfig]
    modules: list
    handles: list
    shared_config: object  # the config object the model held before: other models may hold it too
    starts: StartsMemo = dataclasses.field(default_factory=StartsMemo)  # one computation per forward, not per layer


def _attention_pre_hook(state: _PSAState, name: str, module: Any, args: tuple, kwargs: dict):  # a transformers attention module
    spec = state.spec
    if module.config._attn_implementation != name:
        raise RuntimeError(
            f"PSA was applied with attn_implementation {name!r}, but the model now uses "
            f"{module.config._attn_implementation!r}; call remove_psa(model) before switching"
        )
    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    B, T = hidden.shape[:2]
    cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
    layer = psa_layer(cache, module.layer_idx, spec) if cache is not None else None
    past = layer.get_seq_length() if layer is not None else 0
    starts = state.starts.starts(B, T, past, kwargs.get("position_ids"), kwargs.get("attention_mask"), hidden.device)
    if layer is not None:  # with no hook point listening, the cache shears the chunk's keys as it stores them
        layer.prepare(spec, shear_in_update=not listened(module), starts=starts)
    kwargs["psa_step"] = PSAStep(spec, starts, layer)
    return args, kwargs


def _forward_begins(state: _PSAState, module: nn.Module, args: tuple, kwargs: dict) -> None:
    """A forward pass of the model begins: a cache PSA cannot use is refused before any work, and the sequence
    starts of the last pass are forgotten."""
    cache = next((v for v in (*args, *kwargs.values()) if isinstance(v, Cache)), None)
    if cache is not None:
        check_cache(cache)
    state.starts.forget()


def _attention_modules(model: nn.Module, base: str) -> tuple[list[nn.Module], Any]:
    """The attention modules PSA patches (see ``.detect``) and the config object the model held."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"apply_psa needs a transformers PreTrainedModel, got {type(model).__name__}")
    if getattr(config, "is_encoder_decoder", False):
        raise NotImplementedError("PSA supports decoder-only models; encoder-decoder models are not supported")
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    windowed = getattr(config, "use_sliding_window", True) and (
        window is not None if layer_types is None else "sliding_attention" in layer_types
    )
    if windowed and window is not None and window < 2:  # None: no window
        raise NotImplementedError(f"sliding_window={window} hides each token's predecessor; PSA needs a window >= 2")
    if base == "sdpa" and not getattr(model, "_supports_sdpa", True):
        raise NotImplementedError(f"transformers runs {type(model).__name__} only with eager attention (logit soft-capping "
                                  "or attention sinks); use apply_psa(..., attn_implementation='eager')")
    shared = _own_config(model)
    try:
        pattern = find_attention(model, base)
    except BaseException:
        _point_config(model, model.config, shared)
        raise
    log.info("PSA pattern holds in %s: %s", type(model).__name__, pattern.describe())
    return pattern.modules, shared


def apply_psa(
    model: PreTrainedModel,
    variant: PSAVariant = "key_only",
    gamma: float = 0.8,
    *,
    placement: Placement = "post_rope",
    boundary: Boundary = "replicate",
    attn_implementation: str | None = None,
    max_rollback: int = 0,
    keep_last_call: bool = True,
) -> PreTrainedModel:
    """Turn Phase Space Attention on in a transformers causal LM, in place; returns the model. Given a wrapper such
    as PEFT's ``PeftModel``, it patches the transformers model inside (``get_base_model()``) and returns the wrapper.

    ``variant`` is one of ``symmetric``, ``key_only`` (the best one for induction), ``query_only``,
    ``baseline``; ``gamma`` the shear coupling (``baseline`` has no shear and takes ``gamma=0``: the default
    0.8 is refused for it); ``placement`` must be ``post_rope``. ``boundary``
    ``"replicate"`` (default) sets the momentum to 0 at every sequence start: the first token, the
    first real token after left padding, and wherever ``position_ids`` restarts at 0 (packed
    documents; pass ``use_cache=False`` with them, as transformers keeps packed documents apart in its attention
    mask only then, PSA or not). ``attn_implementation`` is the kernel that attends over q̂, k̂, v (``sdpa`` or
    ``eager``; by default the one the model runs on, and otherwise ``sdpa``, or ``eager`` for a model
    transformers runs only eagerly, such as Gemma 2 with its logit soft-capping or GPT-OSS with its sinks).
    ``max_rollback`` only matters for a PSA *assistant* model in assisted decoding.
    ``keep_last_call=False`` holds the extra state at O(1) right after a long prefill too (the raw
    keys of a call are dropped when it ends); such a model can then be cropped back only
    ``max_rollback`` tokens, so it cannot be the target of assisted decoding.

    ``generate`` then keeps sheared keys in its cache, plus a window of raw keys per layer (and of raw
    queries when gamma_q != 0): the last call's and the one before them, so two rows while it decodes a
    token a step and a prompt's worth right after its prefill (see ``keep_last_call``; a sliding-window
    layer past its window, which cannot be cropped further back, keeps ``max_rollback + 1`` rows). Raises
    NotImplementedError for unsupported architectures and options.

    Args:
        model: a transformers causal LM of a supported architecture (``SUPPORTED``).
        variant: ``symmetric``, ``key_only``, ``query_only`` or ``baseline``.
        gamma: the shear coupling.
        placement: ``post_rope`` (the only placement a transformers model takes).
        boundary: ``replicate`` (momentum 0 at sequence starts) or ``zero``.
        attn_implementation: ``sdpa`` or ``eager``, the kernel over the sheared streams (None: the model's own
            where it is one of them, else ``sdpa`` where the model supports it).
        max_rollback: tokens a cache can be cropped back beyond the last call (assistant models).
        keep_last_call: keep the last call's raw keys until the next one, so any crop within it is exact.

    Returns:
        The same model, patched.

    Examples:
        >>> import torch
        >>> from transformers import AutoModelForCausalLM, LlamaConfig
        >>> from psattn.integrations.hf import apply_psa, psa_spec, remove_psa
        >>> config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                      num_attention_heads=2, num_key_value_heads=1)
        >>> model = AutoModelForCausalLM.from_config(config).eval()
        >>> apply_psa(model, "key_only", gamma=0.8) is model
        True
        >>> psa_spec(model).gamma, model.config.model_type
        (0.8, 'psattn_llama')
        >>> with torch.no_grad():
        ...     tokens = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
        >>> tokens.shape
        torch.Size([1, 7])
        >>> remove_psa(model).config.model_type
        'llama'
    """
    spec = PSASpec(variant, gamma, placement, boundary, max_rollback, keep_last_call)
    wrapper, model = model, _inside_wrapper(model)
    if attn_implementation is None:  # the kernel the model runs on, where PSA can run on it
        current = getattr(getattr(model, "config", None), "_attn_implementation", None)
        attn_implementation = current if current in BASES else "sdpa" if getattr(model, "_supports_sdpa", True) else "eager"
    name = implementation_name(attn_implementation)
    if getattr(model, "_psa_state", None) is not None:
        raise RuntimeError("PSA is already applied to this model; call remove_psa(model) first")
    register_attention()
    modules, shared = _attention_modules(model, attn_implementation)
    register_auto_classes([base_model_type(model.config.model_type)], apply_psa)
    original = model.config._attn_implementation
    model.set_attn_implementation(name)
    if model.config._attn_implementation != name:
        model.set_attn_implementation(original)
        _point_config(model, model.config, shared)
        raise NotImplementedError(f"{type(model).__name__} refused attn_implementation={name!r}")
    state = _PSAState(spec, attn_implementation, original, mark_config(model.config, spec), modules, [], shared)
    for m in modules:
        state.handles.append(m.register_forward_pre_hook(partial(_attention_pre_hook, state, name), with_kwargs=True))
        add_hook_points(m)
    for top in {id(m): m for m in (model, getattr(model, "base_model", model))}.values():  # where a forward pass begins
        state.handles.append(top.register_forward_pre_hook(partial(_forward_begins, state), with_kwargs=True))
    model._psa_state = state  # type: ignore[assignment]  # nn.Module.__setattr__ keeps any value (torch types it narrowly)
    # continuous batching would switch the attention to a paged kernel: refused where it begins, on this model only
    model.init_continuous_batching = refuse_paged_cache  # type: ignore[assignment]  # as _psa_state above
    for step, checked in _GENERATION_STEPS.items():  # generate checks its cache and its mask before the first forward
        if hasattr(type(model), step):
            setattr(model, step, partial(checked, model))
    log.info("PSA %s gamma=%g on %d attention modules of %s",
             spec.variant, spec.gamma, len(modules), type(model).__name__)
    return wrapper


def _inside_wrapper(model):
    """The transformers model a wrapper such as PEFT's ``PeftModel`` holds (its ``get_base_model()``), or ``model``:
    PSA patches the model that ``generate`` and its hooks belong to."""
    base = getattr(model, "get_base_model", None)
    if not isinstance(model, PreTrainedModel) and callable(base) and isinstance(base(), PreTrainedModel):
        return base()
    return model


def _patched(model: nn.Module) -> Any:
    """The module that ``apply_psa`` patched: ``model`` or one inside it (a wrapper such as PEFT's forwards attribute
    look-ups to the model it holds, so only a module's own attributes are read), or None (for anything else too)."""
    if not isinstance(model, nn.Module):
        return None
    return next((m for m in model.modules() if vars(m).get("_psa_state") is not None), None)


def remove_psa(model: PreTrainedModel) -> PreTrainedModel:
    """Undo ``apply_psa``: remove the hooks and restore the original attention implementation, of ``model`` or of the
    patched model inside a wrapper such as PEFT's ``PeftModel``. Caches filled while PSA was on hold sheared keys and
    refuse further use.

    Returns:
        The same model, plain again.

    Examples:
        >>> import torch
        >>> from transformers import AutoModelForCausalLM, LlamaConfig
        >>> from psattn.integrations.hf import apply_psa, remove_psa
        >>> config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                      num_attention_heads=2, num_key_value_heads=1)
        >>> model = AutoModelForCausalLM.from_config(config).eval()
        >>> ids = torch.tensor([[1, 2, 3, 4]])
        >>> with torch.no_grad():
        ...     plain = model(ids).logits
        ...     sheared = apply_psa(model, "key_only", gamma=1.0)(ids).logits
        ...     back = remove_psa(model)(ids).logits
        >>> torch.equal(plain, back), torch.equal(plain, sheared)
        (True, False)
    """
    wrapper, patched = model, _patched(model)
    if patched is None:
        raise RuntimeError("PSA is not applied to this model")
    model, state = patched, patched._psa_state
    for handle in state.handles:
        handle.remove()
    for m in state.modules:
        remove_hook_points(m)
    vars(model).pop("init_continuous_batching", None)  # transformers' own again
    for step in _GENERATION_STEPS:
        vars(model).pop(step, None)
    if saved_spec(state.shared_config) is None:
        _point_config(model, model.config, state.shared_config)  # the plain config it had, untouched all along
    else:  # built as a PSA model (from a saved one): its own copy, made plain
        model.set_attn_implementation(state.original_implementation or "sdpa")
        unmark_config(model.config, state.original_config_class)
        # its class builds with PSA applied, and save_pretrained would name that class, which transformers lacks
        model.__class__ = plain_model_class(type(model))
    model._psa_state = None  # type: ignore[assignment]  # as in apply_psa
    return wrapper


def _point_config(model: nn.Module, old, new) -> None:
    """Every submodule that holds ``old`` (or one of its sub-configs) as ``.config`` holds ``new``'s instead."""
    pairs = {id(old): new}
    for key, value in vars(old).items():
        if isinstance(value, PretrainedConfig) and isinstance(getattr(new, key, None), PretrainedConfig):
            pairs[id(value)] = getattr(new, key)
    for module in model.modules():
        held = getattr(module, "config", None)
        if held is not None and id(held) in pairs:
            module.config = pairs[id(held)]


def _own_config(model: nn.Module):
    """Give ``model`` a config object of its own; return the one it held. transformers' ``from_config``
    shares the config object between every model built from it, and PSA marks the config it patches:
    on a shared object that would turn the other models into PSA models too."""
    shared = model.config
    _point_config(model, shared, copy.deepcopy(shared))
    return shared


def set_psa_gamma(model: nn.Module, gamma: float) -> None:
    """Change the shear coupling of a patched model (or of the patched model inside a wrapper such
    as PEFT's ``PeftModel``) in place; the variant, hence which streams are sheared, stays. Used by
    the γ warm-up of ``.warmup``; a cache filled under another γ refuses further use."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"set_psa_gamma needs a model patched by apply_psa (a torch module), got {type(model).__name__}")
    patched: list[Any] = [m for m in model.modules() if getattr(m, "_psa_state", None) is not None]  # transformers models
    if not patched:
        raise RuntimeError("PSA is not applied to this model; call apply_psa(model, ...) first")
    for m in patched:
        m._psa_state.spec = dataclasses.replace(m._psa_state.spec, gamma=gamma)
        m.config.psa = m._psa_state.spec.to_dict()


def psa_spec(model: nn.Module) -> PSASpec | None:
    """The ``PSASpec`` a model (or the patched model inside a wrapper such as PEFT's ``PeftModel``) was patched with,
    or None."""
    patched = _patched(model)
    return None if patched is None else patched._psa_state.spec


def load_psa_model(
    source,
    variant: str | None = None,
    gamma: float | None = None,
    *,
    placement: str | None = None,
    boundary: str | None = None,
    attn_implementation: str | None = None,
    max_rollback: int | None = None,
    keep_last_call: bool | None = None,
    model_class=None,
    **kwargs,
) -> nn.Module:
    """Load (``source`` a name or path; ``kwargs`` go to ``from_pretrained``) or build (``source`` a
    config) a model with PSA on; any other ``source`` is a TypeError. ``model_class``, a transformers model class,
    defaults to ``AutoModelForCausalLM``.

    A model saved with PSA on comes back with its saved settings; passing settings that differ from
    them raises ValueError (change them after loading with ``remove_psa`` / ``apply_psa``).
    A plain model is converted with the given settings, defaults ``key_only`` and γ = 0.8. A folder
    written by ``psattn export --format hf`` (model type ``psattn``) loads as it was exported.

    Returns:
        The model, with PSA on.

    Examples:
        >>> import tempfile
        >>> from transformers import LlamaConfig
        >>> from psattn.integrations.hf import apply_psa, load_psa_model, psa_spec
        >>> config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                      num_attention_heads=2, num_key_value_heads=1)
        >>> model = load_psa_model(config, "symmetric", gamma=0.5)  # built from a config, PSA on
        >>> path = tempfile.mkdtemp()
        >>> model.save_pretrained(path)
        >>> psa_spec(load_psa_model(path)).variant  # saved settings come back
        'symmetric'
    """
    from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

    if not isinstance(source, (str, os.PathLike, PretrainedConfig)):  # None or 123 was looked up on the Hub, retried
        hint = "; apply_psa(model, ...) patches a model already built" if isinstance(source, nn.Module) else ""
        raise TypeError("load_psa_model's source must be a model name or folder (str or os.PathLike) or a "
                        f"PretrainedConfig, got {type(source).__name__}{hint}")
    if model_class is not None and not (isinstance(model_class, type) and hasattr(model_class, "from_pretrained")):
        raise TypeError("load_psa_model's model_class must be a transformers model class (AutoModelForCausalLM, "
                        f"LlamaForCausalLM, ...), got {model_class!r}")
    given = dict(variant=variant, gamma=gamma, placement=placement, boundary=boundary,
                 max_rollback=max_rollback, keep_last_call=keep_last_call)
    given = {k: v for k, v in given.items() if v is not None}
    config = source if isinstance(source, PretrainedConfig) else AutoConfig.from_pretrained(
        source, **{k: kwargs[k] for k in ("revision", "token", "cache_dir", "local_files_only") if k in kwargs})
    if isinstance(config, PsattnConfig):  # a psattn export: a DecoderLM whose config holds its attention
        if given:
            raise ValueError(f"{source} is a psattn export (model type 'psattn'), which carries its own attention "
                             f"settings ({config.psattn_model['attention']}); load it without {sorted(given)}")
        auto: Any = model_class or AutoModelForCausalLM
        return auto.from_config(source) if isinstance(source, PretrainedConfig) else auto.from_pretrained(source, **kwargs)
    saved = saved_spec(config)
    if saved is not None and not (config.model_type or "").startswith(PREFIX):
        # a config whose PSA settings survived an edit of its model type: transformers builds it plain
        warnings.warn(f"{source if not isinstance(source, PretrainedConfig) else 'this config'} keeps PSA settings "
                      f"({saved}) but its model type is {config.model_type!r}, not {PREFIX + config.model_type!r}, so "
                      "transformers builds a plain model from it; load_psa_model applies those settings to it",
                      stacklevel=2)
    marked = saved is not None and (config.model_type or "").startswith(PREFIX)
    # Validate the options before loading any weights.
    spec = PSASpec(**{**(saved.to_dict() if saved else {}), **given})
    if attn_implementation is not None:  # None: transformers' default, SDPA where the model supports it
        implementation_name(attn_implementation)
        kwargs.setdefault("attn_implementation", attn_implementation)
    if saved is not None and spec != saved:
        raise ValueError(
            f"{source if not isinstance(source, PretrainedConfig) else 'this config'} holds a PSA model saved with "
            f"{saved}; it loads only with those settings (got {given}). Load it, then remove_psa / apply_psa to change them."
        )
    cls: Any = model_class or AutoModelForCausalLM
    if marked and not hasattr(cls, "register"):  # a concrete class: its PSA subclass
        cls = psa_model_class(cls, apply_psa)
    if isinstance(source, PretrainedConfig):
        # the Auto classes build from a config with from_config, concrete model classes with _from_config
        build = getattr(cls, "from_config", None) or cls._from_config
        model = build(source, **kwargs)
    else:
        model = cls.from_pretrained(source, **kwargs)
    if marked:
        return model  # built with PSA applied (see .auto)
    return apply_psa(model, **spec.to_dict(), attn_implementation=attn_implementation)


register_on_look_up(SUPPORTED, apply_psa)
