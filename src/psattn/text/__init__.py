"""Deprecated: the former home of language-model metrics and text generation, kept for one release.

Language-model metrics on held-out text (``psattn.text.metrics``) are now ``psattn.models.lm_eval``;
``continue_text`` and ``continue_ids`` (``psattn.text.generate``) are in ``psattn.models.generate``, beside
``generate``, and ``run_tokenizer`` is in ``psattn.training.run_dir``, beside ``load_trained``. Every old
name still gives the same object, with a DeprecationWarning that names its new home. The corpora,
tokenizers and token streams are ``psattn.textdata``.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

__all__ = ["icl_score", "text_metrics"]  # as before: the names a star import takes

#: old module -> {name: the module that holds it now}
MOVED = {
    "psattn.text": dict.fromkeys(("icl_score", "text_metrics"), "psattn.models.lm_eval"),
    "psattn.text.metrics": dict.fromkeys(
        ("icl_window", "icl_score", "token_losses", "bits_per_byte", "random_repeats", "passage_repeats", "text_metrics"),
        "psattn.models.lm_eval"),
    "psattn.text.generate": {"continue_text": "psattn.models.generate", "continue_ids": "psattn.models.generate",
                             "run_tokenizer": "psattn.training.run_dir"},
}


def moved(module: str, name: str) -> Any:
    """``module.name`` from its new home, with a DeprecationWarning that names it; AttributeError for a
    name ``module`` never had."""
    home = MOVED[module].get(name)
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is now {home}.{name}; psattn.text goes in the next release",
                  DeprecationWarning, stacklevel=3)
    return getattr(_imported(home), name)


def _imported(module: str) -> Any:
    """One of the modules that hold the moved names, imported when an old name is first used; looked up by
    module name, since ``psattn.models.generate`` is also a function of ``psattn.models``. The imports are
    written out so that the layering check sees them."""
    import psattn.models.generate
    import psattn.models.lm_eval
    import psattn.training.run_dir  # noqa: F401  (the three bind one name, psattn; sys.modules holds the modules)

    return sys.modules[module]


def __getattr__(name: str) -> Any:
    if name in ("generate", "metrics"):  # the submodules, which importing psattn.text used to load
        return importlib.import_module(f"{__name__}.{name}")
    return moved(__name__, name)
