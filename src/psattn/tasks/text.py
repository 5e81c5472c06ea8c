"""Language modelling on real text: windows of a tokenized corpus, every next token scored.

A row is ``seq_len + 1`` consecutive tokens of one split's stream; inputs are the first ``seq_len``
and targets the last ``seq_len`` (so position t predicts token t + 1). Training windows start at
offsets drawn from the generator alone, so a batch is a function of (seed, step); held-out windows
come from the held-out text (the last ``eval_fraction`` of every document, or with ``split="file"``
whole held-out documents; see ``psattn.textdata.tokens``), never from training text.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from psattn.tasks._checks import MAX_VOCAB
from psattn.tasks.batch import TaskBatch
from psattn.tasks.split import check_draw, check_split
from psattn.textdata.corpus import absolute_corpus
from psattn.textdata.tokenizer import KINDS
from psattn.textdata.tokens import SPLITS, TokenizedCorpus, tokenize_corpus


@dataclass(frozen=True)
class TextConfig:
    """``corpus``: a named corpus or a path; ``tokenizer``: "byte", "bpe" (trained on the corpus's
    training text with ``vocab_size`` entries) or the path of a saved tokenizer.json; ``split``: hold out
    the last ``eval_fraction`` of every document ("tail"), or every k-th whole document ("file").
    Relative paths (and globs) are made absolute when the config is built, so a run directory's
    config.json finds its text from any folder."""

    corpus: str = "austen"
    tokenizer: str = "byte"
    vocab_size: int = 256
    seq_len: int = 256
    eval_fraction: float = 0.05
    split: Literal["tail", "file"] = "tail"  # hold out each document's tail, or whole documents

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus:
            raise ValueError(f"corpus must be a shipped corpus name or a path, got {self.corpus!r}")
        if not isinstance(self.tokenizer, str) or (self.tokenizer not in KINDS and not self.tokenizer.endswith(".json")):
            raise ValueError(f"tokenizer must be one of {KINDS} or a tokenizer.json path, got {self.tokenizer!r}")
        object.__setattr__(self, "corpus", absolute_corpus(self.corpus))  # frozen: set once, here
        if self.tokenizer.endswith(".json"):
            object.__setattr__(self, "tokenizer", str(Path(self.tokenizer).expanduser().absolute()))
        for name in ("vocab_size", "seq_len"):  # an integer of another type (NumPy's) is stored as a Python int
            if isinstance(getattr(self, name), numbers.Integral) and not isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, int(getattr(self, name)))
        if isinstance(self.eval_fraction, numbers.Real) and not isinstance(self.eval_fraction, (bool, numbers.Integral)):
            object.__setattr__(self, "eval_fraction", float(self.eval_fraction))  # NumPy's float32 too
        if not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool):
            raise ValueError(f"vocab_size must be an integer, got {self.vocab_size!r}")
        if self.tokenizer == "byte" and self.vocab_size != 256:
            raise ValueError(f"the byte tokenizer has vocab_size 256, got {self.vocab_size}")
        if self.tokenizer == "bpe" and not 257 <= self.vocab_size <= MAX_VOCAB:
            raise ValueError(f"a BPE vocabulary needs 257..{MAX_VOCAB} entries (256 bytes plus merges), got {self.vocab_size}")
        if not isinstance(self.seq_len, int) or isinstance(self.seq_len, bool) or self.seq_len < 4:
            raise ValueError(f"seq_len must be an integer >= 4 (the copy measures repeat seq_len // 2 >= 2 tokens), "
                             f"got {self.seq_len!r}")
        if not (isinstance(self.eval_fraction, float) and 0.0 < self.eval_fraction < 0.5 and math.isfinite(self.eval_fraction)):
            raise ValueError(f"eval_fraction must be a number in (0, 0.5), got {self.eval_fraction!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS} (each document's tail, or whole files), got {self.split!r}")

    def tokens(self) -> TokenizedCorpus:
        """The tokenized corpus (built and cached on first use), opened once per config object: a run samples
        every step from the corpus it opened at its start, and hashing a corpus of thousands of files
        (``python-installed``: seconds) at every step would cost more than the step."""
        opened = self.__dict__.get("_tokens")
        if opened is None:
            opened = tokenize_corpus(self.corpus, self.tokenizer, self.vocab_size, self.eval_fraction, self.split)
            object.__setattr__(self, "_tokens", opened)  # not a field: equality, hashing and to_dict ignore it
        return opened


def windows(stream: np.ndarray, starts: np.ndarray, length: int) -> torch.Tensor:
    """(B, length) int64 rows stream[s : s + length] for each start s."""
    index = starts[:, None] + np.arange(length)[None, :]  # (B, length)
    return torch.from_numpy(np.asarray(stream[index], dtype=np.int64))


def sample(config: TextConfig, batch_size: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
    """``batch_size`` windows of ``split``'s text."""
    check_split(split)
    check_draw(batch_size, generator)
    corpus = config.tokens()
    stream = corpus.train if split == "train" else corpus.eval
    span = len(stream) - config.seq_len - 1
    if span < 0:
        raise ValueError(f"the {split} text ({len(stream)} tokens) is shorter than one window of {config.seq_len + 1}")
    starts = torch.randint(0, span + 1, (batch_size,), generator=generator, device=generator.device).cpu().numpy()
    rows = windows(stream, starts, config.seq_len + 1)  # (B, T + 1)
    return TaskBatch(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())


def every_window(config: TextConfig, split: str = "eval") -> TaskBatch:
    """Every window of ``split``'s text once, in order: ``len(stream) - seq_len`` rows (what scoring all of a
    split means, where ``sample`` draws windows with repeats)."""
    check_split(split)
    corpus = config.tokens()
    stream = corpus.train if split == "train" else corpus.eval
    count = len(stream) - config.seq_len
    if count < 1:
        raise ValueError(f"the {split} text ({len(stream)} tokens) is shorter than one window of {config.seq_len + 1}")
    rows = windows(stream, np.arange(count), config.seq_len + 1)  # (N, T + 1)
    return TaskBatch(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())
