"""Phase Space Attention inside Hugging Face transformers models (extra ``[hf]``, transformers >= 5).

    from psattn.integrations.hf import apply_psa, remove_psa
    apply_psa(model, variant="key_only", gamma=0.8)   # Llama, Mistral, Qwen2/3, SmolLM3, ...
    out = model.generate(**inputs)                     # the cache stores sheared keys
    model.save_pretrained(path)                        # the PSA settings go into config.json
    AutoModelForCausalLM.from_pretrained(path)         # the same PSA model (after this import)
    remove_psa(model)

Modules: ``.spec`` (settings), ``.starts`` (sequence starts from position ids and masks),
``.cache`` (``PSALayer`` / ``PSADynamicCache``), ``.attention`` (the registered attention functions),
``.hooks`` (hook points for ``capture``), ``.saving`` (the ``psattn_<base>`` configs),
``.auto`` (their model classes in the Auto classes),
``.detect`` (the dry run that finds the attention modules), ``.support`` (the tested model types),
``.patch`` (apply / remove / load), ``.warmup`` (γ warm-up for converting a model).

Importing this package imports transformers and registers with its Auto classes the ``psattn_<base>``
model types and the ``psattn`` model type of ``psattn export --format hf`` (``.decoder_model``), and the
attention functions ``psa_sdpa`` and ``psa_eager``, so ``import psattn.integrations.hf`` is what a new
process needs before ``from_pretrained`` (unpickling a patched model imports it by itself). A plain
``import psattn`` does not import transformers. The ``psattn hf-demo`` command lives in ``psattn.commands.hf_demo``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psattn.integrations.hf.warmup import GammaWarmup, gamma_warmup

MIN_TRANSFORMERS = (5, 0)


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


check_transformers()

from psattn.integrations.hf.attention import register_attention  # noqa: E402
from psattn.integrations.hf.cache import PSADynamicCache, PSALayer, PSASlidingWindowLayer  # noqa: E402
from psattn.integrations.hf.decoder_model import PsattnConfig, PsattnForCausalLM  # noqa: E402  (registers "psattn")
from psattn.integrations.hf.patch import SUPPORTED, apply_psa, load_psa_model, psa_spec, remove_psa, set_psa_gamma  # noqa: E402
from psattn.integrations.hf.spec import PSASpec  # noqa: E402
from psattn.integrations.hf.starts import chunk_starts  # noqa: E402

register_attention()  # psa_sdpa and psa_eager: a patched model unpickled in a new process finds them

__all__ = ["SUPPORTED", "GammaWarmup", "PSADynamicCache", "PSALayer", "PSASlidingWindowLayer", "PSASpec", "PsattnConfig",
           "PsattnForCausalLM", "apply_psa", "chunk_starts", "gamma_warmup", "load_psa_model", "psa_spec", "remove_psa",
           "set_psa_gamma"]


def __getattr__(name: str):
    if name in ("GammaWarmup", "gamma_warmup"):  # on first use: transformers' Trainer callbacks import PEFT and accelerate
        from psattn.integrations.hf import warmup

        value = globals()[name] = getattr(warmup, name)
        return value
    if name == "PSACache":  # the name until 0.1.0, which psattn.ops.cache.PSACache also has
        import warnings

        warnings.warn("psattn.integrations.hf.PSACache is now PSADynamicCache; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return PSADynamicCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"GammaWarmup", "gamma_warmup"})
