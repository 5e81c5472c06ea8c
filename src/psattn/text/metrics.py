"""Deprecated: language-model metrics on held-out text are now ``psattn.models.lm_eval``; every name here
still works for one release, with a DeprecationWarning."""

from typing import Any

from psattn.text import moved


def __getattr__(name: str) -> Any:
    return moved(__name__, name)
