"""Deprecated: ``continue_text`` and ``continue_ids`` are now in ``psattn.models.generate`` and
``run_tokenizer`` in ``psattn.training.run_dir``; each name here still works for one release, with a
DeprecationWarning."""

from typing import Any

from psattn.text import moved


def __getattr__(name: str) -> Any:
    return moved(__name__, name)
