"""The ``psattn_<base>`` model types in transformers' Auto classes: for each base model type, a
subclass of each of its model classes (causal LM, base model, sequence and token classification,
question answering) that applies PSA with the settings its config carries (``.saving``) as soon as it
is built, registered with ``AutoConfig`` and the matching Auto class, so that
``AutoModelForCausalLM.from_pretrained`` (or ``AutoModelForSequenceClassification.from_pretrained``, ...)
of a saved PSA model gives the model that was saved. ``AutoTokenizer`` maps the type to the base type's
tokenizer class: a saved PSA checkpoint whose tokenizer files name no class loads the tokenizer its base
model's checkpoint would.

Making a base model type's classes imports its transformers modules (over a second for the tested types
together), so ``register_on_look_up`` defers them: transformers' tables of added entries then register a
type the first time they are asked for it (its model type in ``AutoConfig``, its config class in an
Auto class). Listed, a table first registers the deferred types whose config class exists: no config or model
of another type can exist before it is registered (``pipeline()`` lists the causal-LM table to check the class
of the model it is given; ``AutoTokenizer``, given no tokenizer class, ``AutoConfig``'s config classes to find
the model type of the config's). Listing ``AutoConfig``'s model types (its keys) registers every deferred type."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import transformers
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

from psattn.integrations.hf.saving import PREFIX, base_model_type, made_config_classes, psa_config_class, saved_spec

if TYPE_CHECKING:
    from transformers import PreTrainedModel


#: the Auto classes a saved PSA model loads through, each with its map of model types to class names
AUTO_CLASSES = (
    (AutoModelForCausalLM, modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
    (AutoModel, modeling_auto.MODEL_MAPPING_NAMES),
    (AutoModelForSequenceClassification, modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES),
    (AutoModelForTokenClassification, modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES),
    (AutoModelForQuestionAnswering, modeling_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES),
)

_building = threading.local()  # depth: how many models with PSA are being built around this one


class _BuildsWithPSA:
    """Mixin of the registered model classes: a model built from a PSA config comes out patched by
    ``apply_psa`` (``.patch.apply_psa``, handed to ``psa_model_class``). One built inside another (the base
    model a classification head builds with ``AutoModel``) comes out plain: the outer model applies PSA."""

    _psa_apply: ClassVar[Callable[..., Any]]

    def __init__(self, config, *args, **kwargs):
        depth = getattr(_building, "depth", 0)
        _building.depth = depth + 1
        try:
            super().__init__(config, *args, **kwargs)
        finally:
            _building.depth = depth
        if depth:
            self.__class__ = plain_model_class(type(self))
            return
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
    assert model_cls.config_class is not None  # every model class names its config class
    base = base or model_cls.config_class.model_type
    return type(f"PSA{model_cls.__name__}", (_BuildsWithPSA, model_cls),
                {"config_class": psa_config_class(base), "_psa_apply": staticmethod(apply_psa), "__module__": __name__})


def register_auto_classes(model_types, apply_psa: Callable[..., Any]) -> None:
    """Register ``psattn_<base>`` with ``AutoConfig`` and each of ``AUTO_CLASSES`` that maps ``base`` to a class
    (idempotent); the model classes apply PSA with ``apply_psa`` when they are built."""
    for base in model_types:
        if base not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or base not in CONFIG_MAPPING:
            continue  # a model type transformers does not map to a causal LM class: nothing to register
        config_cls = psa_config_class(base)
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        # the base type's tokenizer class (none: AutoTokenizer falls back to TokenizersBackend for both types);
        # the mapping's own register: AutoTokenizer.register would also enter the class in its table of classes by name
        tokenizer_cls = TOKENIZER_MAPPING.get(CONFIG_MAPPING[base], None)
        if tokenizer_cls is not None:
            TOKENIZER_MAPPING.register(config_cls, tokenizer_cls, exist_ok=True)
        for auto, names in AUTO_CLASSES:
            name = names.get(base)  # a class name (a few model types map to several: those are left out)
            base_cls = getattr(transformers, name, None) if isinstance(name, str) else None
            if base_cls is None:
                continue  # no such head for this model type
            model_cls = psa_model_class(base_cls, apply_psa, base)
            auto.register(config_cls, model_cls, exist_ok=True)
            # the checkpoint names of older releases (GPT-NeoX's embed_out): transformers looks them up by class name
            renames = get_checkpoint_conversion_mapping(base_cls.__name__)
            if renames:
                register_checkpoint_conversion_mapping(model_cls.__name__, renames, overwrite=True)
    for base in model_types:
        _deferred.pop(base, None)  # registered: look-ups no longer wait for them


_deferred: dict[str, Callable[..., Any]] = {}  # base model type -> apply_psa, for the types not registered yet
_registering = threading.RLock()  # held while deferred types are registered: a look-up in another thread waits
_underway: set[str] = set()  # the deferred types being registered (by the thread that holds _registering)


def _tables() -> list:
    """transformers' mappings that a saved PSA model is looked up in: ``AutoConfig``'s, each Auto class's and
    ``AutoTokenizer``'s."""
    return [CONFIG_MAPPING, *(auto._model_mapping for auto, _ in AUTO_CLASSES), TOKENIZER_MAPPING]


class _RegistersOnLookUp(dict):
    """A mapping's table of added entries (transformers' ``_extra_content``: model type -> config class, or
    config class -> model class) that first registers the deferred ``psattn_<base>`` type a key names, and
    before it is listed those whose config class exists (every deferred type before AutoConfig's table lists its
    keys, the model types)."""

    def __init__(self, entries: dict, keys_are_model_types: bool) -> None:
        super().__init__(entries)
        self.keys_are_model_types = keys_are_model_types

    def _listed(self, keys: bool = False) -> None:
        _register_deferred(among=None if keys and self.keys_are_model_types else made_config_classes)

    def __contains__(self, key: object) -> bool:
        _register_deferred(key)
        return super().__contains__(key)

    def __getitem__(self, key):
        _register_deferred(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        _register_deferred(key)
        return super().get(key, default)

    def __iter__(self):
        self._listed(keys=True)
        return super().__iter__()

    def __len__(self) -> int:
        self._listed(keys=True)
        return super().__len__()

    def keys(self):
        self._listed(keys=True)
        return super().keys()

    def values(self):
        self._listed()
        return super().values()

    def items(self):
        self._listed()
        return super().items()


def _register_deferred(key: object = None, among: Collection[str] | None = None) -> None:
    """Register the deferred type that ``key`` (a model type or a config class) names; for None, every one (every
    one in ``among`` where given)."""
    if not _deferred:  # each type leaves it once registered, so a look-up never sees one half registered
        return
    if key is None:
        bases = [base for base in _deferred if among is None or base in among]
    else:
        model_type = key if isinstance(key, str) else getattr(key, "model_type", None)
        if not isinstance(model_type, str) or not model_type.startswith(PREFIX):
            return  # not a PSA type: the common look-up costs this test alone
        bases = [base_model_type(model_type)]
    with _registering:
        for base in bases:
            apply_psa = _deferred.get(base)
            if apply_psa is not None and base not in _underway:  # underway: a look-up made while registering it
                _underway.add(base)
                try:
                    register_auto_classes([base], apply_psa)
                finally:
                    _underway.discard(base)


def register_on_look_up(model_types, apply_psa: Callable[..., Any]) -> None:
    """``register_auto_classes(model_types, apply_psa)``, each type when transformers first looks it up (see
    above); all of them now where transformers' tables are not the dicts this expects."""
    tables = _tables()
    if not all(isinstance(getattr(t, "_extra_content", None), dict) for t in tables):
        register_auto_classes(model_types, apply_psa)
        return
    with _registering:
        for table in tables:
            if not isinstance(table._extra_content, _RegistersOnLookUp):
                table._extra_content = _RegistersOnLookUp(table._extra_content, keys_are_model_types=table is CONFIG_MAPPING)
        for base in model_types:
            _deferred.setdefault(base, apply_psa)
