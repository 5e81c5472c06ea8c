"""Tokenizers for the text task: byte-level (no dependency) and BPE (Hugging Face ``tokenizers``).

Both turn text into ids and back and serialise to one JSON file, which every text run keeps in its
run directory (``tokenizer.json``) so that the directory alone suffices for evaluation and
generation. ``token_bytes`` gives each id's length in UTF-8 bytes, the denominator of bits per byte.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from psattn.jsonfile import DuplicateKey, loads

KINDS = ("byte", "bpe")


class ByteTokenizer:
    """Ids are the 256 byte values of the UTF-8 encoding."""

    kind = "byte"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``, as ids 0..255."""
        try:
            return list(text.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise not_utf8(text, err.start) from None

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` of each text."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of byte ids; invalid UTF-8 becomes U+FFFD. Ids outside [0, 256) are a ValueError."""
        return bytes(_known_ids(ids, self.vocab_size)).decode("utf-8", errors="replace")

    def token_bytes(self) -> np.ndarray:
        """UTF-8 bytes of each id (V,): one each; bits per byte divide by them."""
        return np.ones(self.vocab_size, dtype=np.int64)

    def to_json(self) -> str:
        """The tokenizer.json a run directory keeps."""
        return json.dumps({"kind": "byte"})


class BPETokenizer:
    """Byte-level BPE from Hugging Face ``tokenizers`` (GPT-2's pre-tokenisation, no special tokens)."""

    kind = "bpe"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        """A byte-level BPE tokenizer of at most ``vocab_size`` ids (256 bytes plus merges) fitted on ``texts``:
        fewer when the texts hold fewer pairs to merge. A ``vocab_size`` that is not an integer above 256 is a
        ValueError, and ``texts`` that are one string (not an iterable of texts) a TypeError."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or vocab_size < 257:
            # 10 gave the 256 bytes alone, -1 an OverflowError from the library
            raise ValueError(f"a BPE vocabulary needs 257 or more entries (256 bytes plus merges), got {vocab_size!r}")
        if isinstance(texts, str):  # fitted on its characters one by one: the 256 bytes and no merge
            raise TypeError("texts must be an iterable of texts (a list of strings), got one string")
        tokenizers = hf_tokenizers()
        Tokenizer, decoders, models = tokenizers.Tokenizer, tokenizers.decoders, tokenizers.models
        pre_tokenizers, trainers = tokenizers.pre_tokenizers, tokenizers.trainers

        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``."""
        try:
            return self.tokenizer.encode(text).ids
        except TypeError:  # the library's 'TextInputSequence must be str' for a lone surrogate
            _check_utf8([text])
            raise

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` of every text, on every core (the same ids), without the character offsets ``encode``
        also computes (``encode_batch_fast``, tokenizers 0.20 and later: 1.7 times as fast on Python source)."""
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        try:
            return [e.ids for e in encode(texts)]
        except TypeError:
            _check_utf8(texts)
            raise

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; ids outside [0, vocab_size) are a ValueError."""
        return self.tokenizer.decode(_known_ids(ids, self.vocab_size))

    def token_bytes(self) -> np.ndarray:
        """UTF-8 bytes of each id (V,), for bits per byte."""
        # a byte-level token is written in GPT-2's byte alphabet: one character per byte
        return np.array([len(self.tokenizer.id_to_token(i)) for i in range(self.vocab_size)], dtype=np.int64)

    def to_json(self) -> str:
        """The tokenizer.json a run directory keeps (the Hugging Face tokenizer inside)."""
        return json.dumps({"kind": "bpe", "tokenizer": json.loads(self.tokenizer.to_str())})


Tokenizer = ByteTokenizer | BPETokenizer


def _known_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """``ids`` as Python ints, or a ValueError unless all lie in [0, vocab_size): the BPE library decoded an id
    past its vocabulary as nothing and -1 as an OverflowError, the byte tokenizer said "bytes must be in range"."""
    known = [int(i) for i in ids]
    if known and (min(known) < 0 or max(known) >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}) (the tokenizer's vocabulary), got ids from "
                         f"{min(known)} to {max(known)}")
    return known


def not_utf8(text: str, position: int) -> ValueError:
    """The error for ``text`` whose character at ``position`` UTF-8 cannot encode."""
    return ValueError(f"the text holds {text[position]!r} at character {position}, a lone surrogate that UTF-8 cannot "
                      "encode (bytes that were not UTF-8, such as a command-line argument in another encoding); "
                      "give UTF-8 text")


def _check_utf8(texts: Iterable[str]) -> None:
    """``not_utf8`` for the first of ``texts`` that UTF-8 cannot encode."""
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise not_utf8(text, err.start) from None


def hf_tokenizers():
    """The Hugging Face ``tokenizers`` module, or an ImportError that says how to install it."""
    try:
        import tokenizers
    except ImportError as err:
        raise ImportError("the BPE tokenizer needs Hugging Face tokenizers: pip install "
                          "'phase-space-attention[text]' (the reproduce extra includes it)") from err
    return tokenizers


def tokenizer_from_json(text: str, where: str = "the tokenizer file") -> Tokenizer:
    """The tokenizer a tokenizer.json text describes (byte or BPE); ValueError, naming ``where`` the text came
    from, for anything else (not JSON, a key given twice, another kind, a BPE part the tokenizers library refuses)."""
    try:
        data = loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not valid JSON: {err}") from None
    except DuplicateKey as err:
        raise ValueError(f"{where} gives the key {err.args[0]!r} twice in one object; keep the one you mean") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        Tokenizer = hf_tokenizers().Tokenizer
        if not isinstance(data.get("tokenizer"), dict):
            raise ValueError(f"{where} says kind 'bpe' but holds no 'tokenizer' object")
        try:
            return BPETokenizer(Tokenizer.from_str(json.dumps(data["tokenizer"])))
        except Exception as err:  # the library's own Exception, from Rust
            raise ValueError(f"{where} holds a BPE tokenizer the tokenizers library cannot read: {err}") from None
    raise ValueError(f"{where} is not a psattn tokenizer file (kind {kind!r}; expected one of {KINDS})")


def tokenizer_file(path: str | Path) -> Path:
    """``path`` as a Path: FileNotFoundError unless it exists, ValueError unless it is a regular file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no tokenizer at {path}")
    if not path.is_file():
        raise ValueError(f"tokenizer {path} is not a regular file; give the path of a tokenizer.json")
    return path


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at ``path`` (a run directory's tokenizer.json)."""
    path = tokenizer_file(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a tokenizer.json (not UTF-8 text)") from None
    return tokenizer_from_json(text, str(path))
