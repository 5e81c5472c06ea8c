"""A corpus tokenized once into memory-mapped token files, split into disjoint train and held-out text.

The held-out split is the last ``eval_fraction`` of every document, cut at a paragraph boundary
(a blank line) when the document has one near the cut, so held-out text is never a window of training
text; or, split by file (``split="file"``), whole documents: every k-th in corpus order, k =
round(1 / eval_fraction), of the documents left once every exact copy of an earlier one is dropped (a
vendored copy of a package, or one package installed twice), so no held-out file, nor a copy of it, was
seen in training at all. A BPE tokenizer is trained
on the training parts only. The result is cached under
``$PSATTN_CACHE`` (default ``~/.cache/psattn``) in ``text/<corpus hash>-<tokenizer>-<fraction>[-byfile]/``::

    tokenizer.json   the tokenizer           train.npy, eval.npy   token streams (uint16 when they fit)
    meta.json        corpus, sizes, bytes    docs.json             per-document token counts, by file

and a second run with the same corpus and tokenizer opens these files instead of tokenizing again.
``meta.json`` records each array's shape, dtype and SHA-256, the tokenizer's SHA-256 and the corpus hash;
opening an entry checks them all (that no token id reaches the vocabulary, and that the entry is of the
corpus asked for), so a truncated, overwritten, tampered or misplaced cache is an error that names the
file, never training data; a corpus that changes while it is tokenized is refused. An entry without a whole
``meta.json`` (a build cut short) is rebuilt; one of another format (``FORMAT``), another version's, is left
as it is, and this version's entry goes beside it, in ``<name>-format<FORMAT>/`` (remove the other once no
version of its format uses the cache). Staging folders of builds on this machine whose process is gone are
removed.

A BPE tokenizer found in ``$PSATTN_CACHE/tokenizers/<entry name>.json`` (``kept_tokenizer``) is loaded instead of
trained when its entry is built: a fresh machine that is given the tokenizer an earlier machine trained on the same
corpus (a GPU sweep's next piece) skips the training and gets the same ids, BPE training being deterministic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
import os
import shutil
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from psattn.processes import new_staging, process_alive, signals_unwind
from psattn.progress import progress_bar
from psattn.textdata.corpus import Document, corpus_hash, load_documents
from psattn.textdata.tokenizer import (
    BPETokenizer,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_file,
    tokenizer_from_json,
)

log = logging.getLogger(__name__)
#: meta.json's layout; entries of another format are rebuilt (3: the split by file drops copies; 4: a blank line with
#: Windows line ends is a paragraph break)
FORMAT = 4


class CorruptCache(ValueError):
    """A token-cache entry does not match its meta.json."""


def cache_root() -> Path:
    """``$PSATTN_CACHE``, or ``~/.cache/psattn`` when it is unset or empty (an empty value would put the
    cache in the working directory)."""
    return Path(os.environ.get("PSATTN_CACHE", "").strip() or Path.home() / ".cache" / "psattn").expanduser()


@dataclass(frozen=True)
class TokenizedCorpus:
    """A corpus's cached token streams (memory-mapped), its tokenizer and what a run is bound to."""
    train: np.ndarray  # (N_train,) memory-mapped token ids
    eval: np.ndarray  # (N_eval,)
    tokenizer: Tokenizer
    token_bytes: np.ndarray  # (V,) UTF-8 bytes of each id
    directory: Path
    fingerprint: dict  # corpus and tokenizer hashes, and the arrays' checksums: what a run is bound to


#: the ends of a blank line: "\n\n", and in text with Windows line ends ("\r\n\r\n") its last three characters
BLANK_LINES = ("\n\n", "\n\r\n")


def split_text(text: str, eval_fraction: float) -> tuple[str, str]:
    """(train part, held-out tail) of one document; the cut moves to the nearest paragraph break (a blank
    line, with Unix or Windows line ends) within 5% of the document, so the tail starts with a whole paragraph."""
    cut = int(len(text) * (1.0 - eval_fraction))
    slack = max(1, len(text) // 20)
    breaks = [(i, i + len(blank)) for blank in BLANK_LINES  # (start, end) of the nearest blank line before and after
              for i in (text.rfind(blank, cut - slack, cut), text.find(blank, cut, cut + slack)) if i > 0]
    if breaks:
        cut = min(breaks, key=lambda b: abs(b[0] - cut))[1]
    return text[:cut], text[cut:]


def split_tokens(tokens: np.ndarray, eval_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out): the first ``1 - eval_fraction`` of a document's tokens and the rest."""
    cut = int(len(tokens) * (1.0 - eval_fraction))
    return tokens[:cut], tokens[cut:]


SPLITS = ("tail", "file")


def held_out_files(count: int, eval_fraction: float) -> list[bool]:
    """Which of ``count`` documents the split by file holds out: every k-th, k = round(1 / eval_fraction)."""
    every = max(2, round(1 / eval_fraction))
    held = [i % every == every - 1 for i in range(count)]
    if not any(held):
        raise ValueError(f"a split by file holds out every {every}th document, and the corpus has {count} distinct "
                         "documents (exact copies count once): raise task.eval_fraction or give a corpus of more files")
    return held


def distinct_documents(documents: list[Document]) -> list[Document]:
    """``documents`` without every exact copy (same text, or same tokens) of an earlier one: what the split by
    file holds out from, since a held-out file whose copy is trained on would be held-out text seen in training."""
    seen, kept = set(), []
    for d in documents:
        content = d.text.encode() if d.text is not None else np.asarray(d.tokens, dtype=np.int64).tobytes()
        digest = hashlib.sha256(content).digest()
        if digest not in seen:
            seen.add(digest)
            kept.append(d)
    return kept


def _split(pieces: list, eval_fraction: float, split: str, cut) -> list[tuple]:
    """(train part, held-out part) of every document: its tail by ``cut``, or the whole document on one side."""
    if split == "tail":
        return [cut(piece, eval_fraction) for piece in pieces]
    return [(piece[:0], piece) if held else (piece, piece[:0])
            for piece, held in zip(pieces, held_out_files(len(pieces), eval_fraction), strict=True)]


def _tokenizer_key(tokenizer: str, vocab_size: int) -> str:
    if tokenizer == "byte":
        return "byte"
    if tokenizer == "bpe":
        return f"bpe{vocab_size}"
    return "file-" + _sha256(tokenizer_file(tokenizer).read_bytes())[:16]


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _array_record(array: np.ndarray) -> dict:
    return {"shape": list(array.shape), "dtype": str(array.dtype), "sha256": _sha256(np.ascontiguousarray(array))}


def kept_tokenizer(entry: Path) -> Path:
    """Where a BPE tokenizer trained for the cache entry ``entry`` (a folder of ``$PSATTN_CACHE/text``) may be kept
    beforehand, to be loaded instead of trained when the entry is built: ``$PSATTN_CACHE/tokenizers/<name>.json``."""
    return entry.parent.parent / "tokenizers" / f"{entry.name}.json"


def _make_tokenizer(tokenizer: str, vocab_size: int, train_texts: list[str], kept: Path | None = None) -> Tokenizer:
    if tokenizer == "byte":
        return ByteTokenizer()
    if tokenizer != "bpe":
        return load_tokenizer(tokenizer)
    if kept is None or not kept.is_file():
        return BPETokenizer.train(train_texts, vocab_size)
    tok = load_tokenizer(kept)
    if tok.kind != "bpe" or tok.vocab_size > vocab_size:
        raise ValueError(f"{kept} is not a BPE tokenizer of at most {vocab_size} ids, as its name says: delete it, "
                         "and the tokenizer is trained again")
    log.info("loaded the BPE tokenizer %s instead of training it", kept)
    return tok


ENCODE_BATCH = 256  # documents encoded at once (in parallel, by the BPE tokenizer)


def _encode(tokenizer: Tokenizer, parts: list[str], desc: str) -> np.ndarray:
    chunks = [np.asarray(ids, dtype=np.int64)
              for start in progress_bar(range(0, len(parts), ENCODE_BATCH), desc=desc, leave=False)
              for ids in tokenizer.encode_batch(parts[start : start + ENCODE_BATCH])]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _build(documents: list[Document], tokenizer: str, vocab_size: int, eval_fraction: float, out: Path,
           corpus_digest: str = "", split: str = "tail", kept_bpe: Path | None = None) -> None:
    texts = [d.text for d in documents if d.text is not None]
    if texts and len(texts) != len(documents):
        raise ValueError("a corpus must be all text files or all token files, not both")
    copies = 0
    if split == "file":
        kept = distinct_documents(documents)
        documents, copies = kept, len(documents) - len(kept)
        texts = [d.text for d in documents if d.text is not None]
    if texts:
        parts = _split(texts, eval_fraction, split, split_text)
        tok = _make_tokenizer(tokenizer, vocab_size, [train for train, _ in parts if train], kept_bpe)
        train = _encode(tok, [p[0] for p in parts], "tokenizing (train)")
        held = _encode(tok, [p[1] for p in parts], "tokenizing (held-out)")
        counts = [[len(tok.encode(p[0])), len(tok.encode(p[1]))] for p in parts] if len(parts) < 64 else []
    else:
        if tokenizer == "bpe":
            raise ValueError("a token-file corpus needs the tokenizer that made it: 'byte' or a tokenizer.json path")
        tok = _make_tokenizer(tokenizer, vocab_size, [])
        streams = []
        for d in documents:
            assert d.tokens is not None  # a document holds text or tokens
            streams.append(d.tokens.astype(np.int64))
        pieces = _split(streams, eval_fraction, split, split_tokens)
        train, held = np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])
        counts = [[len(p[0]), len(p[1])] for p in pieces]
    for name, stream in (("train", train), ("eval", held)):
        if len(stream) and (stream.min() < 0 or stream.max() >= tok.vocab_size):
            raise ValueError(f"{name} tokens fall outside the tokenizer's vocabulary of {tok.vocab_size}")
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
    arrays = {"train": train.astype(dtype), "eval": held.astype(dtype)}
    for name, array in arrays.items():
        np.save(out / f"{name}.npy", array)
    tokenizer_json = tok.to_json()
    (out / "tokenizer.json").write_text(tokenizer_json)
    per_document = {d.path or d.name: c for d, c in zip(documents, counts, strict=True)} if counts else {}  # < 64 texts
    (out / "docs.json").write_text(json.dumps(per_document))
    (out / "meta.json").write_text(json.dumps({  # written last: its presence marks a complete entry
        "format": FORMAT, "documents": len(documents), "copies_dropped": copies,
        "train_tokens": int(len(train)), "eval_tokens": int(len(held)),
        "vocab_size": tok.vocab_size, "eval_fraction": eval_fraction, "split": split, "corpus_sha256": corpus_digest,
        "tokenizer_sha256": _sha256(tokenizer_json.encode()),
        "arrays": {name: _array_record(array) for name, array in arrays.items()},
    }))


def tokenize_corpus(corpus: str, tokenizer: str = "byte", vocab_size: int = 256,
                    eval_fraction: float = 0.05, split: str = "tail") -> TokenizedCorpus:
    """The cached token streams of ``corpus`` (building them first if needed), held out by ``split``: the last
    ``eval_fraction`` of each document, or every k-th document. ``vocab_size`` sizes a BPE tokenizer trained on
    the corpus (the other tokenizers have their own). A ``split`` other than tail or file, and an
    ``eval_fraction`` outside (0, 1), are a ValueError."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, numbers.Real) or not 0 < eval_fraction < 1:
        # 0 held nothing out (the split by file: a ZeroDivisionError), 1.5 cut each document before its start
        raise ValueError(f"eval_fraction must be a number in (0, 1), got {eval_fraction!r}")
    digest = corpus_hash(corpus)
    key = f"{digest}-{_tokenizer_key(tokenizer, vocab_size)}-{float(eval_fraction)!r}"  # exact; 0.05 stays "0.05"
    key += "-byfile" if split == "file" else ""
    return _open(entry_directory(cache_root() / "text" / key), corpus, tokenizer, vocab_size, eval_fraction, split, digest)


def entry_directory(shared: Path) -> Path:
    """``shared``, the entry's name in every version of psattn, unless its meta.json is of another format: then
    ``<shared>-format<FORMAT>`` beside it. Two versions of two formats sharing a cache rebuilt each other's entry
    at every run; the one of the other format is left to the version that wrote it."""
    try:
        found = json.loads((shared / "meta.json").read_text())["format"]
    except (OSError, ValueError, KeyError, TypeError):  # no entry, or no whole meta.json: built here, as before
        return shared
    return shared.with_name(f"{shared.name}-format{FORMAT}") if isinstance(found, int) and found != FORMAT else shared


@lru_cache(maxsize=8)
def _open(directory: Path, corpus: str, tokenizer: str, vocab_size: int, eval_fraction: float,
          split: str = "tail", digest: str = "") -> TokenizedCorpus:
    """The entry in ``directory`` of the corpus whose ``corpus_hash`` is ``digest``, built first if needed."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_staging(directory)
    if not _complete(directory):
        _build_entry(directory, corpus, tokenizer, vocab_size, eval_fraction, split, digest)
    meta = json.loads((directory / "meta.json").read_text())
    if digest and meta["corpus_sha256"] != digest:
        raise _corrupt(directory / "meta.json", f"it holds the tokens of corpus {meta['corpus_sha256']}, not of "
                                                f"{corpus} ({digest})")
    try:
        tokenizer_json = (directory / "tokenizer.json").read_text()
    except (OSError, UnicodeDecodeError) as err:  # gone, or not text: a bare errno, or a codec's words naming no file
        raise _corrupt(directory / "tokenizer.json", f"it cannot be read ({err})") from None
    if _sha256(tokenizer_json.encode()) != meta["tokenizer_sha256"]:
        raise _corrupt(directory / "tokenizer.json", "its SHA-256 differs from meta.json's")
    tok = tokenizer_from_json(tokenizer_json, str(directory / "tokenizer.json"))
    arrays = {name: _verified(directory / f"{name}.npy", record, tok.vocab_size)
              for name, record in meta["arrays"].items()}
    fingerprint = {"corpus_sha256": meta["corpus_sha256"], "tokenizer_sha256": meta["tokenizer_sha256"],
                   **{f"{name}_sha256": record["sha256"] for name, record in meta["arrays"].items()}}
    return TokenizedCorpus(train=arrays["train"], eval=arrays["eval"], tokenizer=tok, token_bytes=tok.token_bytes(),
                           directory=directory, fingerprint=fingerprint)


def _complete(directory: Path) -> bool:
    """Whether ``directory`` is a finished entry of this format (its meta.json whole: every record the
    checks read); a folder that is not (a build cut short before the atomic rename cannot leave one, but an
    older format or a hand-edited or deleted meta.json can) is removed."""
    if _whole(directory):
        return True
    if directory.exists():
        log.info("rebuilding the token cache entry %s (no whole meta.json of format %d)", directory, FORMAT)
        return _remove_stale(directory)
    return False


def _whole(directory: Path) -> bool:
    """Whether ``directory`` holds a whole meta.json of this format (every record the checks read)."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
        arrays = meta["arrays"]
        return (meta["format"] == FORMAT and isinstance(meta["corpus_sha256"], str)
                and isinstance(meta["tokenizer_sha256"], str)
                and all(isinstance(arrays[name][key], (str, list)) for name in ("train", "eval")
                        for key in ("shape", "dtype", "sha256")))
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False


def _remove_stale(directory: Path) -> bool:
    """Remove the entry ``directory`` found stale, moving it aside first (atomic), so that two processes that
    both found it so do not remove each other's files, nor the entry one of them has built since the other
    read the stale meta.json (that one is put back); whether ``directory`` is now a finished entry."""
    aside = directory.parent / f"{_staging_prefix(directory)}stale{os.urandom(4).hex()}"
    try:
        directory.rename(aside)
    except FileNotFoundError:  # another process moved it aside first
        return False
    if _whole(aside):  # another process's new entry, not the stale one this one read
        try:
            aside.rename(directory)
            return True
        except OSError:  # a third one's is there already
            pass
    shutil.rmtree(aside, ignore_errors=True)
    return False


def _build_entry(directory: Path, corpus: str, tokenizer: str, vocab_size: int, eval_fraction: float,
                 split: str = "tail", digest: str = "") -> None:
    """Build the entry in a staging folder named after this process and machine, then rename it into place (atomic).
    ``digest``: the corpus hash the entry is keyed by; a corpus that no longer hashes to it once read (it
    changed since) is refused, as its tokens would be served under the key of the text it held before."""
    # SIGTERM and SIGHUP, which would end the process on the spot, remove the staging folder first
    with signals_unwind(), new_staging(directory.parent, _staging_prefix(directory)) as staging:
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any other
        documents = load_documents(corpus)
        read = corpus_hash(corpus)
        if digest and read != digest:
            raise ValueError(f"corpus {corpus} changed while it was being tokenized (its hash went from {digest} "
                             f"to {read}); run again once its files stop changing")
        _build(documents, tokenizer, vocab_size, eval_fraction, staging, read, split, kept_tokenizer(directory))
        try:
            staging.rename(directory)  # another process may have won the race
        except OSError:
            if not _complete(directory):
                raise


def _staging_prefix(directory: Path) -> str:
    """``<entry>.staging-<pid>-<host>-``: the start of the name of this process's staging folders for ``directory``."""
    return f"{directory.name}.staging-{os.getpid()}-{socket.gethostname()}-"


def _remove_abandoned_staging(directory: Path) -> None:
    """Remove the staging folders of ``directory`` left by builds on this machine whose process no longer runs.
    Another machine's (a cache on a shared home folder) may still be building: its processes are not visible here."""
    for staging in directory.parent.glob(f"{directory.name}.staging-*"):
        pid, _, rest = staging.name[len(directory.name) + len(".staging-"):].partition("-")
        host = rest.rpartition("-")[0]  # "" in the names of older versions, which named no machine
        if pid.isdigit() and host in ("", socket.gethostname()) and not process_alive(int(pid)):
            log.info("removing %s, left by an interrupted cache build", staging)
            shutil.rmtree(staging, ignore_errors=True)


def _corrupt(path: Path, why: str) -> CorruptCache:
    return CorruptCache(f"the token cache file {path} is corrupt: {why}. Delete {path.parent} "
                        "to rebuild it (the next run tokenizes the corpus again)")


def _verified(path: Path, record: dict, vocab_size: int) -> np.ndarray:
    """The memory-mapped array at ``path``, checked against its meta.json ``record`` and the vocabulary."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise _corrupt(path, f"it cannot be read ({err})") from None
    if list(array.shape) != record["shape"] or str(array.dtype) != record["dtype"]:
        raise _corrupt(path, f"it holds {array.dtype} {tuple(array.shape)}, meta.json says "
                             f"{record['dtype']} {tuple(record['shape'])}")
    if _sha256(np.ascontiguousarray(array)) != record["sha256"]:
        raise _corrupt(path, "its SHA-256 differs from meta.json's (the tokens were changed)")
    if len(array) and int(array.max()) >= vocab_size:
        raise _corrupt(path, f"it holds token id {int(array.max())}, beyond the vocabulary of {vocab_size}")
    return array
