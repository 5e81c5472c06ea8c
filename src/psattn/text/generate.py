"""Continue a prompt with a text run's own model and tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from psattn.models.generate import generate
from psattn.text.tokenizer import load_tokenizer


def continue_text(model, tokenizer, prompt: str, max_new_tokens: int = 200, *, temperature: float = 0.8,
                  top_k: int | None = None, seed: int = 0) -> str:
    """The text ``model`` writes after ``prompt``: sampled at ``temperature`` (greedy at 0) from a
    generator seeded with ``seed``, so the same call gives the same text."""
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt must not be empty")
    out = generate(model, torch.tensor([ids]), max_new_tokens, do_sample=temperature > 0,
                   temperature=temperature or 1.0, top_k=top_k, generator=torch.Generator().manual_seed(seed))
    return tokenizer.decode(out.sequences[0, len(ids):].tolist())


def run_tokenizer(run_dir: str | Path):
    path = Path(run_dir) / "tokenizer.json"
    if not path.exists():
        raise ValueError(f"{run_dir} has no tokenizer.json: only runs of the text task can generate text")
    return load_tokenizer(path)
