"""PSA models that survive ``save_pretrained`` / ``from_pretrained``.

A patched model's config becomes an instance of a subclass of its own config class whose
``model_type`` is ``psattn_<base>`` (``psattn_llama``, ...) and which carries the
``PSASpec`` as ``config.psa``; both are written to ``config.json``. So

- after ``import psattn.integrations.hf``, ``AutoModelForCausalLM.from_pretrained(path)`` and ``load_psa_model``
  build the registered subclass of the base model class (``.auto``), which applies PSA with the saved
  settings as soon as it is built: the same model that was saved;
- without it, transformers refuses the folder (it does not know the model type
  ``psattn_llama``), and a concrete class (``LlamaForCausalLM.from_pretrained``) warns that it got a
  ``psattn_llama`` checkpoint: a saved PSA model never loads silently as a plain one.

The weights are those of the base model (PSA has no parameters), so ``remove_psa``
before saving gives a plain checkpoint again.
"""

from __future__ import annotations

from functools import cache
from typing import overload

from transformers import PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from psattn.integrations.hf.spec import PSASpec

PREFIX = "psattn_"


@overload
def base_model_type(model_type: str) -> str: ...
@overload
def base_model_type(model_type: None) -> None: ...
def base_model_type(model_type: str | None) -> str | None:
    """``llama`` for ``psattn_llama`` (and for ``llama``)."""
    if model_type is not None and model_type.startswith(PREFIX):
        return model_type[len(PREFIX):]
    return model_type


made_config_classes: set[str] = set()  # the base model types whose psattn_<base> config class exists


@cache
def psa_config_class(base: str) -> type[PretrainedConfig]:
    """The config class of model type ``psattn_<base>``: the base config plus ``psa`` settings. Made at run
    time, so its instances pickle as "this class of ``base``" (``_reduce_config``)."""
    base_cls = CONFIG_MAPPING[base]
    made_config_classes.add(base)
    return type(f"PSA{base_cls.__name__}", (base_cls,),
                {"model_type": PREFIX + base, "__module__": __name__, "__reduce__": _reduce_config})


def _reduce_config(config: PretrainedConfig) -> tuple:
    """How a PSA config pickles (and deep-copies): its base model type and its attributes."""
    return _rebuild_config, (base_model_type(type(config).model_type), vars(config))


def _rebuild_config(base: str, attributes: dict) -> PretrainedConfig:
    """The PSA config of model type ``psattn_<base>`` with these attributes (the inverse of ``_reduce_config``)."""
    cls = psa_config_class(base)
    config = cls.__new__(cls)
    vars(config).update(attributes)
    return config


def saved_spec(config: PretrainedConfig) -> PSASpec | None:
    """The PSA settings a config carries (None for a plain model); ValueError if they are malformed."""
    values = getattr(config, "psa", None)
    if values is None:
        if (config.model_type or "").startswith(PREFIX):
            raise ValueError(f"config of model type {config.model_type!r} has no PSA settings ('psa')")
        return None
    try:
        return PSASpec.from_dict(values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"malformed PSA settings in the model config: {err}") from err


def mark_config(config: PretrainedConfig, spec: PSASpec) -> type[PretrainedConfig]:
    """Make ``config`` a PSA config (in place): its class becomes ``psattn_<base>``'s, ``psa`` the
    spec. Returns the class it had, for ``unmark_config``."""
    original = type(config)
    config.__class__ = psa_config_class(base_model_type(config.model_type))
    config.psa = spec.to_dict()
    return original


def unmark_config(config: PretrainedConfig, original: type[PretrainedConfig]) -> None:
    """Undo ``mark_config``: back to ``original`` (the base class if that was a PSA one), without ``psa``."""
    if hasattr(config, "psa"):
        del config.psa
    if original.model_type.startswith(PREFIX):
        original = CONFIG_MAPPING[base_model_type(original.model_type)]
    config.__class__ = original
    if str(vars(config).get("model_type", "")).startswith(PREFIX):  # a loaded config keeps its own copy
        del config.model_type
