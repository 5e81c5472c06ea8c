"""Building a config dataclass from plain values (a parsed JSON object, keyword overrides)."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def from_fields(cls: type[T], values: Mapping[str, Any], what: str) -> T:
    """``cls(**values)``, refusing with a ValueError (naming ``what``) anything but a mapping of
    ``cls``'s field names (those its constructor takes); the dataclass checks the values themselves."""
    known = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be a JSON object with fields {known}, got {values!r}")
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} fields {unknown}; known: {known}")
    return cls(**values)


@functools.cache
def literal_fields(cls: type) -> dict[str, tuple[Any, ...]]:
    """The fields of dataclass ``cls`` typed ``Literal[...]``, with their allowed values."""
    hints = typing.get_type_hints(cls)
    return {f.name: typing.get_args(hints[f.name]) for f in dataclasses.fields(cls)
            if typing.get_origin(hints[f.name]) is Literal}


def check_choices(obj: Any, what: str) -> None:
    """Refuse, naming ``what`` and the field, a value outside its ``Literal[...]`` type: a TypeError for a value of
    another type than the choices' (None or a number where a name is taken), a ValueError for another value."""
    # a class is hashable; mypy checks its unbound __hash__ and says it is not
    for name, choices in literal_fields(type(obj)).items():  # type: ignore[arg-type]
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, tuple({type(choice) for choice in choices})):
            raise TypeError(f"{what} {name} must be one of {list(choices)}, got {value!r}")
        if value not in choices:
            raise ValueError(f"unknown {what} {name} {value!r}; expected one of {list(choices)}")


@functools.cache
def int_fields(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` typed ``int``."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if hints[f.name] is int)


def check_ints(obj: Any, what: str) -> None:
    """Refuse, with a TypeError naming ``what`` and the field, a field typed ``int`` that holds anything but
    an integer (2.0 and True included: a JSON file or an override can give either, and a run config read from
    one refuses it with a ValueError, ``RunConfig.from_dict``'s "malformed task section"); an integer of another
    type (NumPy's) is stored as a Python int."""
    for name in int_fields(type(obj)):  # type: ignore[arg-type]  # a class is hashable (see check_choices)
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{what} {name} must be an integer, got {value!r}")
        object.__setattr__(obj, name, int(value))  # frozen configs too


def plain_numbers(obj: Any) -> None:
    """Store each field of dataclass ``obj`` that holds a number of another type than Python's (NumPy's
    ``int64``, ``float32``) as a Python ``int`` or ``float``, so that the checks that follow see what they
    expect and the config writes as JSON; Python's own numbers, and bools, are left as they are."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, (bool, int, float)) or not isinstance(value, numbers.Real):
            continue
        object.__setattr__(obj, f.name, int(value) if isinstance(value, numbers.Integral) else float(value))
