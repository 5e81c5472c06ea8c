"""Phase Space Attention inside Hugging Face transformers models (extra ``[hf]``, transformers >= 5).

    from psattn.integrations.hf import apply_psa, remove_psa
    apply_psa(model, variant="key_only", gamma=0.8)   # Llama, Mistral, Qwen2/3, SmolLM3, ...
    out = model.generate(**inputs)                     # the cache stores sheared keys
    remove_psa(model)

Modules: :mod:`.spec` (settings), :mod:`.starts` (sequence starts from position ids and masks),
:mod:`.cache` (``PSALayer`` / ``PSACache``), :mod:`.attention` (the registered attention functions),
:mod:`.patch` (apply / remove / load), :mod:`.demo` (the ``psattn hf-demo`` command).

Attributes load lazily, so ``psattn.integrations.hf.demo.register`` (used by the CLI) does not
import transformers.
"""

from __future__ import annotations

from importlib import import_module

MIN_TRANSFORMERS = (5, 0)

_EXPORTS = {
    "apply_psa": "patch",
    "remove_psa": "patch",
    "load_psa_model": "patch",
    "psa_spec": "patch",
    "SUPPORTED": "patch",
    "PSASpec": "spec",
    "PSACache": "cache",
    "PSALayer": "cache",
    "chunk_starts": "starts",
}

__all__ = sorted(_EXPORTS)


def check_transformers() -> None:
    """Raise an ImportError naming the fix when transformers is missing or older than 5.0."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            "psattn.integrations.hf needs transformers >= 5: pip install 'phase-space-attention[hf]'"
        ) from err
    major_minor = tuple(int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit())
    if major_minor < MIN_TRANSFORMERS:
        raise ImportError(f"psattn.integrations.hf needs transformers >= 5.0, found {transformers.__version__}")


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    check_transformers()
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
