"""Continue a prompt with a text run's own model and tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from psattn.models.device import model_device
from psattn.models.generate import generate
from psattn.textdata.tokenizer import load_tokenizer


def continue_text(model, tokenizer, prompt: str, max_new_tokens: int = 200, *, temperature: float = 0.8,
                  top_k: int | None = None, top_p: float | None = None, seed: int = 0, context: int | None = None) -> str:
    """The text ``model`` writes after ``prompt``: sampled at ``temperature`` (greedy at 0; ``top_k`` and
    ``top_p`` as in ``psattn.models.generate``) from a generator seeded with ``seed``, so the same call
    gives the same text; ``context``: see ``continue_ids``.

    Args:
        model (DecoderLM): a text run's model (``load_trained(run_dir)``).
        tokenizer (ByteTokenizer | BPETokenizer): its tokenizer (``run_tokenizer(run_dir)``).
        prompt: the text to continue.
        max_new_tokens: tokens to write.
        temperature: sampling temperature; 0 is greedy.
        top_k: sample among the k most likely tokens.
        top_p: sample among the fewest most likely tokens holding this much probability.
        seed: the sampling seed.
        context: the window the model was trained on (the run's ``task.seq_len``).

    Returns:
        The continuation, without the prompt.

    Examples:
        >>> from psattn import DecoderLM, ModelConfig
        >>> from psattn.text.generate import continue_text
        >>> from psattn.textdata import ByteTokenizer
        >>> model = DecoderLM(ModelConfig(vocab_size=256, d_model=32, n_heads=2)).eval()
        >>> text = continue_text(model, ByteTokenizer(), "Hello", 8, seed=1)
        >>> text == continue_text(model, ByteTokenizer(), "Hello", 8, seed=1)  # seeded: the same text
        True
    """
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt must not be empty")
    new = continue_ids(model, ids, max_new_tokens, context=context, do_sample=temperature > 0,
                       temperature=temperature or 1.0, top_k=top_k, top_p=top_p, generator=torch.Generator().manual_seed(seed))
    return tokenizer.decode(new)


def continue_ids(model, ids: list[int], max_new_tokens: int, *, context: int | None = None, **sampling) -> list[int]:
    """``max_new_tokens`` token ids after ``ids``. ``context`` is the window the model was trained on:
    generation stays within it, as nanoGPT's sampler does. Once prompt and continuation fill it, each
    further token is predicted from the last ``context - 1`` tokens alone (a fresh forward pass per
    token, positions restarting at 0), never from positions the model has not seen; a longer prompt
    keeps its last ``context - 1`` tokens. ``sampling`` goes to ``generate``."""
    if context is not None and context < 2:
        raise ValueError(f"context must be at least 2 tokens, got {context}")
    window = list(ids[-(context - 1):]) if context is not None else list(ids)
    room = max_new_tokens if context is None else min(max_new_tokens, context - len(window))
    device = model_device(model)
    new = generate(model, torch.tensor([window], device=device), room, **sampling).sequences[0, len(window):].tolist()
    while len(new) < max_new_tokens:  # past the window: slide it, one token at a time
        assert context is not None  # without a window the first call asked for them all
        recent = (window + new)[-(context - 1):]
        new += generate(model, torch.tensor([recent], device=device), 1, **sampling).sequences[0, -1:].tolist()
    return new


def run_tokenizer(run_dir: str | Path):
    """The tokenizer of a text run's directory; ValueError for a run without one."""
    path = Path(run_dir) / "tokenizer.json"
    if not path.exists():
        raise ValueError(f"{run_dir} has no tokenizer.json: only runs of the text task can generate text")
    return load_tokenizer(path)
