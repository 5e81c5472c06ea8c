"""The ``psattn_<base>`` model types in transformers' Auto classes: for each base model type, a
subclass of its causal LM class that applies PSA with the settings its config carries (``.saving``)
as soon as it is built, registered with ``AutoConfig`` and ``AutoModelForCausalLM``, so that
``AutoModelForCausalLM.from_pretrained`` of a saved PSA model gives the model that was saved."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import transformers
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from psattn.integrations.hf.saving import psa_config_class, saved_spec

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class _BuildsWithPSA:
    """Mixin of the registered model classes: a model built from a PSA config comes out patched by
    ``apply_psa`` (``.patch.apply_psa``, handed to ``psa_model_class``)."""

    _psa_apply: ClassVar[Callable[..., Any]]

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        spec = saved_spec(config)
        if spec is None:
            raise ValueError(f"{type(self).__name__} needs a config with PSA settings ('psa'), got {type(config).__name__}")
        implementation = config._attn_implementation or "sdpa"
        base = implementation.removeprefix("psa_")
        if any(p.device.type == "meta" for p in self.parameters()):  # from_pretrained: weights come later
            self._psa_pending = (spec, base)
            return
        type(self)._psa_apply(self, **spec.to_dict(), attn_implementation=base)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Load, then apply PSA (the dry run of ``apply_psa`` needs the loaded weights)."""
        model = super().from_pretrained(*args, **kwargs)
        pending = vars(model).pop("_psa_pending", None)
        if pending is not None:
            spec, base = pending
            cls._psa_apply(model, **spec.to_dict(), attn_implementation=base)
        return model


def plain_model_class(model_cls: type) -> type:
    """The transformers model class that ``psa_model_class`` derived ``model_cls`` from (``model_cls`` itself
    when it is no such subclass): the class of a model built with PSA once PSA is removed."""
    return next(c for c in model_cls.__mro__ if not issubclass(c, _BuildsWithPSA))


@cache
def psa_model_class(model_cls: type[PreTrainedModel], apply_psa: Callable[..., Any],
                    base: str | None = None) -> type[PreTrainedModel]:
    """The subclass of a transformers model class that builds with PSA applied (by ``apply_psa``) from
    ``config.psa``; ``base`` is the model type, when it is not that of the class's config (``exaone``
    uses ``LlamaForCausalLM``)."""
    if issubclass(model_cls, _BuildsWithPSA):
        return model_cls
    assert model_cls.config_class is not None  # every causal LM class names its config class
    base = base or model_cls.config_class.model_type
    return type(f"PSA{model_cls.__name__}", (_BuildsWithPSA, model_cls),
                {"config_class": psa_config_class(base), "_psa_apply": staticmethod(apply_psa), "__module__": __name__})


def register_auto_classes(model_types, apply_psa: Callable[..., Any]) -> None:
    """Register ``psattn_<base>`` with ``AutoConfig`` and ``AutoModelForCausalLM`` (idempotent); the
    model classes apply PSA with ``apply_psa`` when they are built."""
    for base in model_types:
        if base not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or base not in CONFIG_MAPPING:
            continue  # a model type transformers does not map to a causal LM class: nothing to register
        config_cls = psa_config_class(base)
        base_cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[base])
        model_cls = psa_model_class(base_cls, apply_psa, base)
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)
        # the checkpoint names of older releases (GPT-NeoX's embed_out): transformers looks them up by class name
        renames = get_checkpoint_conversion_mapping(base_cls.__name__)
        if renames:
            register_checkpoint_conversion_mapping(model_cls.__name__, renames, overwrite=True)
