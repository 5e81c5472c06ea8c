"""PSA models that survive ``save_pretrained`` / ``from_pretrained``.

A patched model's config becomes an instance of a subclass of its own config class whose
``model_type`` is ``psattn_<base>`` (``psattn_llama``, ...) and which carries the
``PSASpec`` as ``config.psa``; both are written to ``config.json``. So

- after ``import psattn.integrations.hf``, ``AutoModelForCausalLM.from_pretrained(path)`` and ``load_psa_model``
  build the registered subclass of the base model class, which applies PSA with the saved settings
  as soon as it is built: the same model that was saved;
- without it, transformers refuses the folder (it does not know the model type
  ``psattn_llama``), and a concrete class (``LlamaForCausalLM.from_pretrained``) warns that it got a
  ``psattn_llama`` checkpoint: a saved PSA model never loads silently as a plain one.

The weights are those of the base model (PSA has no parameters), so ``remove_psa``
before saving gives a plain checkpoint again.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, overload

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from psattn.integrations.hf.spec import PSASpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

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


@cache
def psa_config_class(base: str) -> type[PretrainedConfig]:
    """The config class of model type ``psattn_<base>``: the base config plus ``psa`` settings."""
    base_cls = CONFIG_MAPPING[base]
    return type(f"PSA{base_cls.__name__}", (base_cls,), {"model_type": PREFIX + base, "__module__": __name__})


class _BuildsWithPSA:
    """Mixin of the registered model classes: a model built from a PSA config comes out patched."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        from psattn.integrations.hf.patch import apply_psa

        spec = saved_spec(config)
        if spec is None:
            raise ValueError(f"{type(self).__name__} needs a config with PSA settings ('psa'), got {type(config).__name__}")
        implementation = config._attn_implementation or "sdpa"
        base = implementation.removeprefix("psa_")
        if any(p.device.type == "meta" for p in self.parameters()):  # from_pretrained: weights come later
            self._psa_pending = (spec, base)
            return
        apply_psa(self, **spec.to_dict(), attn_implementation=base)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Load, then apply PSA (the dry run of ``apply_psa`` needs the loaded weights)."""
        from psattn.integrations.hf.patch import apply_psa

        model = super().from_pretrained(*args, **kwargs)
        pending = vars(model).pop("_psa_pending", None)
        if pending is not None:
            spec, base = pending
            apply_psa(model, **spec.to_dict(), attn_implementation=base)
        return model


@cache
def psa_model_class(model_cls: type[PreTrainedModel], base: str | None = None) -> type[PreTrainedModel]:
    """The subclass of a transformers model class that builds with PSA applied from ``config.psa``;
    ``base`` is the model type, when it is not that of the class's config (``exaone`` uses ``LlamaForCausalLM``)."""
    if issubclass(model_cls, _BuildsWithPSA):
        return model_cls
    assert model_cls.config_class is not None  # every causal LM class names its config class
    base = base or model_cls.config_class.model_type
    return type(f"PSA{model_cls.__name__}", (_BuildsWithPSA, model_cls),
                {"config_class": psa_config_class(base), "__module__": __name__})


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


def register_auto_classes(model_types) -> None:
    """Register ``psattn_<base>`` with ``AutoConfig`` and ``AutoModelForCausalLM`` (idempotent)."""
    for base in model_types:
        if base not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or base not in CONFIG_MAPPING:
            continue  # a model type transformers does not map to a causal LM class: nothing to register
        config_cls = psa_config_class(base)
        base_cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[base])
        model_cls = psa_model_class(base_cls, base)
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)
        # the checkpoint names of older releases (GPT-NeoX's embed_out): transformers looks them up by class name
        renames = get_checkpoint_conversion_mapping(base_cls.__name__)
        if renames:
            register_checkpoint_conversion_mapping(model_cls.__name__, renames, overwrite=True)
