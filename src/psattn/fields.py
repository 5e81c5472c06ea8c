"""Building a config dataclass from plain values (a parsed JSON object, keyword overrides)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def from_fields(cls: type[T], values: Mapping[str, Any], what: str) -> T:
    """``cls(**values)``, refusing with a ValueError (naming ``what``) anything but a mapping of
    ``cls``'s field names; the dataclass checks the values themselves."""
    known = sorted(f.name for f in dataclasses.fields(cls))
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be a JSON object with fields {known}, got {values!r}")
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} fields {unknown}; known: {known}")
    return cls(**values)
