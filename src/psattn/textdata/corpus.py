"""Where text comes from: the shipped corpora or a user's path, read as a list of documents.

A corpus is named or a path. Named corpora: ``"austen"``, the six novels shipped in
``psattn/textdata/corpora``, and ``"python-stdlib"``, source code every Python install already has: the
running interpreter's standard-library modules (the top-level ``.py`` files of
``sysconfig.get_paths()["stdlib"]``, each one document; which Python it was is part of the corpus hash
through the files' contents); and ``"python-installed"``, every ``.py`` file of the running
interpreter's installed packages: its standard library with its subfolders and its ``site-packages``
(purelib and platlib), each file one document, in sorted path order, those that are not UTF-8 left out
(hundreds of MB where torch is installed; which files it holds is the machine's, so record its hash);
``"python-installed:NMB"`` (``"python-installed:160MB"``) is a sample of it of at most N megabytes: its files in
a fixed pseudo-random order, by the SHA-256 of each one's path below its folder, as many as fit, so that every
package is sampled, the same files wherever the same packages are installed. A path is
a UTF-8 text file (``.txt``, optionally compressed as ``.txt.xz`` / ``.txt.gz``), a folder of such
files (each file one document, in sorted order), or an already tokenized token file (``.npy``:
a 1-D integer array, one document); a regular file, not a device or a pipe (a corpus is read twice: hashed,
then tokenized). Documents keep their order, so the held-out split can take
the last part of each one.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import lzma
import re
import stat
import sys
import sysconfig
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

TEXT_SUFFIXES = (".txt", ".txt.xz", ".txt.gz")
TOKEN_SUFFIX = ".npy"
SHIPPED = ("austen",)
PYTHON_STDLIB = "python-stdlib"
PYTHON_INSTALLED = "python-installed"
NAMED = (*SHIPPED, PYTHON_STDLIB, PYTHON_INSTALLED)
_INSTALLED_SAMPLE = re.compile(rf"{PYTHON_INSTALLED}:([1-9][0-9]*)MB")


@dataclass(frozen=True)
class Document:
    """One document of a corpus: its text, or its token ids when the corpus is already tokenized."""
    name: str
    text: str | None = None  # a text document
    tokens: np.ndarray | None = None  # an already tokenized document (1-D integers)
    path: str = ""  # the file it was read from (names may repeat: notes.v1.txt and notes.v2.txt are both "notes")


def shipped_corpus_dir(name: str) -> Path:
    """The folder of a corpus shipped inside the package."""
    return Path(str(resources.files("psattn.textdata") / "corpora" / name))


def python_stdlib_files() -> list[Path]:
    """The running interpreter's top-level standard-library modules, sorted by name."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no standard-library source under {root} (is this Python stripped of its .py files?)")
    return files


def _installed_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    return sorted({Path(paths[key]).resolve() for key in ("stdlib", "purelib", "platlib") if key in paths})


def _foreign_site_packages(roots: list[Path]) -> list[Path]:
    """The site-packages folders inside the standard library that the running interpreter does not import from:
    in a virtual environment, its base interpreter's (their packages are another environment's)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    importable = {Path(p).resolve() for p in sys.path if p} | set(roots)
    return [folder for name in ("site-packages", "dist-packages")
            if (folder := stdlib / name).is_dir() and folder.resolve() not in importable]


def _installed_sizes() -> dict[Path, int]:
    """The size in bytes of every ``.py`` file under the running interpreter's standard library and site-packages,
    each file once (one reached by two paths, site-packages inside the standard library or a hard link, under
    the first of its paths in sorted order), by path; a site-packages folder inside the standard library that the
    interpreter does not import from (a virtual environment's base interpreter's) is left out. Files are told
    apart by device and inode, not by resolving each path: that took most of the time of a walk over tens of
    thousands of files."""
    roots = _installed_roots()
    foreign = _foreign_site_packages(roots)
    found: dict[tuple[int, int], tuple[Path, int]] = {}  # (device, inode) -> (path, size)
    for root in roots:
        if not root.is_dir():
            continue
        for path in root.rglob("*.py"):
            if any(path.is_relative_to(folder) for folder in foreign):
                continue
            try:
                info = path.stat()
            except OSError:  # a broken link
                continue
            key = (info.st_dev, info.st_ino)
            if stat.S_ISREG(info.st_mode) and (key not in found or path < found[key][0]):
                found[key] = (path, info.st_size)
    if not found:
        raise FileNotFoundError(f"no Python source under {', '.join(map(str, roots))}")
    return dict(sorted(found.values()))


def python_installed_files() -> list[Path]:
    """Every ``.py`` file under the running interpreter's standard library and site-packages, each once,
    sorted by path."""
    return list(_installed_sizes())


def installed_sample_bytes(corpus: str) -> int | None:
    """The size limit in bytes of a ``python-installed:NMB`` sample; None for any other corpus."""
    match = _INSTALLED_SAMPLE.fullmatch(corpus)
    return None if match is None else int(match.group(1)) * 1_000_000


def python_installed_sample(max_bytes: int) -> list[Path]:
    """``python_installed_files`` in a fixed pseudo-random order (the SHA-256 of each file's path below the
    deepest folder of the standard library or site-packages holding it), the first whose sizes add up to
    at most ``max_bytes``, sorted by path."""
    roots = sorted(_installed_roots(), key=lambda root: len(root.parts), reverse=True)  # site-packages before stdlib

    def order(path: Path) -> str:
        below = next(path.relative_to(root) for root in roots if path.is_relative_to(root))
        return hashlib.sha256(below.as_posix().encode()).hexdigest()

    sizes = _installed_sizes()
    chosen, total = [], 0
    for path in sorted(sizes, key=order):
        total += sizes[path]
        if total > max_bytes:
            break
        chosen.append(path)
    return sorted(chosen)


def _installed(corpus: str) -> bool:
    """Whether ``corpus`` is ``python-installed`` or a sample of it."""
    return corpus == PYTHON_INSTALLED or installed_sample_bytes(corpus) is not None


def resolve(corpus: str) -> Path:
    """The file or folder that ``corpus`` (a shipped name or a path) refers to."""
    if corpus in SHIPPED:
        return shipped_corpus_dir(corpus)
    path = Path(corpus).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"corpus {corpus!r} is neither a named corpus {NAMED} (or {PYTHON_INSTALLED}:NMB, a "
                                "sample of N megabytes) nor an existing path")
    return path


def _is_text(path: Path) -> bool:
    return any(path.name.endswith(s) for s in TEXT_SUFFIXES)


GLOB_CHARACTERS = "*?["


def absolute_corpus(corpus: str) -> str:
    """``corpus`` with a relative path or glob made absolute (against the current folder), so that a run
    directory's config finds its text from any folder; a named corpus, an absolute path and a bare word
    that names no file (an unknown name, reported as such later) are returned unchanged."""
    if corpus in NAMED or _installed(corpus):
        return corpus
    path = Path(corpus).expanduser()
    if path.is_absolute() or not (path.exists() or any(c in corpus for c in GLOB_CHARACTERS) or len(path.parts) > 1):
        return str(path)
    return str(Path.cwd() / path)


def corpus_files(corpus: str) -> list[Path]:
    """The files of ``corpus`` in document order: a named corpus; a glob (``src/**/*.py``, ``**`` reaching
    into subfolders), every file it matches; a folder, its ``.txt`` (``.txt.xz``, ``.txt.gz``) files;
    a file, itself (a ``.npy`` token file, or UTF-8 text whatever its name)."""
    if corpus == PYTHON_STDLIB:
        return python_stdlib_files()
    if corpus == PYTHON_INSTALLED:
        return python_installed_files()
    if (max_bytes := installed_sample_bytes(corpus)) is not None:
        return python_installed_sample(max_bytes)
    if corpus not in SHIPPED and any(c in corpus for c in GLOB_CHARACTERS) and not Path(corpus).exists():
        files = sorted(Path(p) for p in glob.glob(str(Path(corpus).expanduser()), recursive=True) if Path(p).is_file())
        if not files:
            raise ValueError(f"corpus pattern {corpus!r} matches no files")
        return files
    path = resolve(corpus)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and _is_text(p))
        if not files:
            raise ValueError(f"corpus folder {path} holds no text files ({', '.join(TEXT_SUFFIXES)}); for other "
                             f"files give a pattern, e.g. task.corpus='{path}/**/*.py'")
        return files
    if not path.is_file():  # read twice (hashed, then tokenized): /dev/zero never ends, a pipe blocks or is empty the second time
        raise ValueError(f"corpus {path} is not a regular file (a device, a pipe or a socket); save its text to a file first")
    return [path]


def describe_corpus(corpus: str) -> str:
    """One line saying what ``corpus`` is, for reports: its files and megabytes of text (of ``python-installed``,
    the UTF-8 files alone, as ``load_documents`` reads them)."""
    sizes = []  # one file read at a time: python-installed is hundreds of MB
    for path in corpus_files(corpus):
        text = _read_bytes(path)
        if not _installed(corpus) or _is_utf8(text):
            sizes.append(len(text))
    files, megabytes = sizes, sum(sizes) / 1e6
    if corpus == "austen":
        return f"Jane Austen's six novels, shipped with psattn ({megabytes:.1f} MB)"
    if corpus == PYTHON_STDLIB:
        return (f"the source of Python {sys.version_info.major}.{sys.version_info.minor}'s standard library "
                f"({len(files)} top-level modules, {megabytes:.1f} MB)")
    if _installed(corpus):
        sample = "" if corpus == PYTHON_INSTALLED else f"a sample of at most {corpus.split(':')[1]} of "
        return (f"{sample}the Python source of Python {sys.version_info.major}.{sys.version_info.minor}'s installed "
                f"packages ({len(files)} files, {megabytes:.1f} MB)")
    return f"{corpus} ({len(files)} file{'s' * (len(files) != 1)}, {megabytes:.1f} MB)"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_bytes(path: Path) -> bytes:
    """The bytes of ``path``, decompressed where its name ends in .xz or .gz; ValueError, naming the file, where
    they do not decompress (truncated, corrupt, or no such archive at all)."""
    kind = next((k for k in ("xz", "gz") if path.name.endswith("." + k)), None)
    data = path.read_bytes()
    try:
        return lzma.decompress(data) if kind == "xz" else gzip.decompress(data) if kind == "gz" else data
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as err:  # gzip's BadGzipFile is an OSError
        raise ValueError(f"{path} is not a whole .{kind} archive ({err}); replace it with a whole copy") from None


def read_document(path: Path) -> Document:
    """The document in ``path``: UTF-8 text (``.txt``, ``.txt.xz``, ``.txt.gz``) or token ids (``.npy``)."""
    name = path.name.split(".")[0]
    if path.suffix == TOKEN_SUFFIX:
        try:
            tokens = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:  # numpy's words on a file that is no array suggest unpickling it
            raise ValueError(f"token file {path} is not a .npy array (np.save's format, no pickles): "
                             f"{str(err).split('. ')[0]}") from None
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"token file {path} must hold a 1-D integer array, got {tokens.dtype} {tokens.shape}")
        return Document(name, tokens=tokens, path=str(path))
    try:
        return Document(name, text=_read_bytes(path).decode("utf-8"), path=str(path))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text: {err}") from None


def load_documents(corpus: str) -> list[Document]:
    """Every document of ``corpus``, in order (of ``python-installed`` and its samples, the UTF-8 files alone)."""
    if not _installed(corpus):
        return [read_document(p) for p in corpus_files(corpus)]
    documents = []
    for path in corpus_files(corpus):
        try:
            documents.append(read_document(path))
        except ValueError:  # a source file in another encoding: a fact of installed packages, not bad input
            continue
    return documents


def corpus_hash(corpus: str) -> str:
    """A digest of the corpus files' names and contents (the token cache's key). Every name and every
    content enters with its length in front, so no two different corpora give the same byte stream."""
    digest = hashlib.sha256()
    for path in corpus_files(corpus):
        for part in (path.name.encode(), path.read_bytes()):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()[:16]
