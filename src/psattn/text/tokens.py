"""A corpus tokenized once into memory-mapped token files, split into disjoint train and held-out text.

The held-out split is the last ``eval_fraction`` of every document, cut at a paragraph boundary
(a blank line) when the document has one near the cut, so held-out text is never a window of training
text. A BPE tokenizer is trained on the training parts only. The result is cached under
``$PSATTN_CACHE`` (default ``~/.cache/psattn``) in ``text/<corpus hash>-<tokenizer>-<fraction>/``::

    tokenizer.json   the tokenizer           train.npy, eval.npy   token streams (uint16 when they fit)
    meta.json        corpus, sizes, bytes    docs.json             per-document token counts

and a second run with the same corpus and tokenizer opens these files instead of tokenizing again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from psattn.progress import progress_bar
from psattn.text.corpus import Document, corpus_hash, load_documents
from psattn.text.tokenizer import BPETokenizer, ByteTokenizer, Tokenizer, load_tokenizer, tokenizer_from_json


def cache_root() -> Path:
    return Path(os.environ.get("PSATTN_CACHE", Path.home() / ".cache" / "psattn")).expanduser()


@dataclass(frozen=True)
class TokenizedCorpus:
    train: np.ndarray  # (N_train,) memory-mapped token ids
    eval: np.ndarray  # (N_eval,)
    tokenizer: Tokenizer
    token_bytes: np.ndarray  # (V,) UTF-8 bytes of each id
    directory: Path


def split_text(text: str, eval_fraction: float) -> tuple[str, str]:
    """(train part, held-out tail) of one document; the cut moves to the nearest paragraph break
    within 5% of the document, so the tail starts with a whole paragraph."""
    cut = int(len(text) * (1.0 - eval_fraction))
    slack = max(1, len(text) // 20)
    before, after = text.rfind("\n\n", cut - slack, cut), text.find("\n\n", cut, cut + slack)
    candidates = [i for i in (before, after) if i > 0]
    if candidates:
        cut = min(candidates, key=lambda i: abs(i - cut)) + 2
    return text[:cut], text[cut:]


def split_tokens(tokens: np.ndarray, eval_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    cut = int(len(tokens) * (1.0 - eval_fraction))
    return tokens[:cut], tokens[cut:]


def _tokenizer_key(tokenizer: str, vocab_size: int) -> str:
    if tokenizer == "byte":
        return "byte"
    if tokenizer == "bpe":
        return f"bpe{vocab_size}"
    return "file-" + str(abs(hash(Path(tokenizer).read_text())) % 10**12)


def _make_tokenizer(tokenizer: str, vocab_size: int, train_texts: list[str]) -> Tokenizer:
    if tokenizer == "byte":
        return ByteTokenizer()
    if tokenizer == "bpe":
        return BPETokenizer.train(train_texts, vocab_size)
    return load_tokenizer(tokenizer)


def _encode(tokenizer: Tokenizer, parts: list[str], desc: str) -> np.ndarray:
    chunks = [np.asarray(tokenizer.encode(p), dtype=np.int64) for p in progress_bar(parts, desc=desc, leave=False)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _build(documents: list[Document], tokenizer: str, vocab_size: int, eval_fraction: float, out: Path) -> None:
    texts = [d for d in documents if d.text is not None]
    if texts and len(texts) != len(documents):
        raise ValueError("a corpus must be all text files or all token files, not both")
    if texts:
        parts = [split_text(d.text, eval_fraction) for d in documents]
        tok = _make_tokenizer(tokenizer, vocab_size, [train for train, _ in parts])
        train = _encode(tok, [p[0] for p in parts], "tokenizing (train)")
        held = _encode(tok, [p[1] for p in parts], "tokenizing (held-out)")
        counts = [[len(tok.encode(p[0])), len(tok.encode(p[1]))] for p in parts] if len(parts) < 64 else []
    else:
        if tokenizer == "bpe":
            raise ValueError("a token-file corpus needs the tokenizer that made it: 'byte' or a tokenizer.json path")
        tok = _make_tokenizer(tokenizer, vocab_size, [])
        pieces = [split_tokens(d.tokens.astype(np.int64), eval_fraction) for d in documents]
        train, held = np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])
        counts = [[len(p[0]), len(p[1])] for p in pieces]
    for name, stream in (("train", train), ("eval", held)):
        if len(stream) and (stream.min() < 0 or stream.max() >= tok.vocab_size):
            raise ValueError(f"{name} tokens fall outside the tokenizer's vocabulary of {tok.vocab_size}")
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
    np.save(out / "train.npy", train.astype(dtype))
    np.save(out / "eval.npy", held.astype(dtype))
    (out / "tokenizer.json").write_text(tok.to_json())
    (out / "docs.json").write_text(json.dumps({d.name: c for d, c in zip(documents, counts)}))
    (out / "meta.json").write_text(json.dumps({
        "documents": len(documents), "train_tokens": int(len(train)), "eval_tokens": int(len(held)),
        "vocab_size": tok.vocab_size, "eval_fraction": eval_fraction,
    }))


def tokenize_corpus(corpus: str, tokenizer: str = "byte", vocab_size: int = 256,
                    eval_fraction: float = 0.05) -> TokenizedCorpus:
    """The cached token streams of ``corpus`` (building them first if needed)."""
    key = f"{corpus_hash(corpus)}-{_tokenizer_key(tokenizer, vocab_size)}-{eval_fraction:g}"
    return _open(cache_root() / "text" / key, corpus, tokenizer, vocab_size, eval_fraction)


@lru_cache(maxsize=8)
def _open(directory: Path, corpus: str, tokenizer: str, vocab_size: int, eval_fraction: float) -> TokenizedCorpus:
    if not (directory / "meta.json").exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any other
        try:
            _build(load_documents(corpus), tokenizer, vocab_size, eval_fraction, staging)
            try:
                staging.rename(directory)  # atomic; another process may have won the race
            except OSError:
                if not (directory / "meta.json").exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    tok = tokenizer_from_json((directory / "tokenizer.json").read_text())
    return TokenizedCorpus(
        train=np.load(directory / "train.npy", mmap_mode="r"),
        eval=np.load(directory / "eval.npy", mmap_mode="r"),
        tokenizer=tok, token_bytes=tok.token_bytes(), directory=directory,
    )
