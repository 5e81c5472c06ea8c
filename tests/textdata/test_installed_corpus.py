"""The installed-packages corpus and the held-out split by file."""

import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from psattn.tasks import make_task_config
from psattn.textdata import corpus as corpora
from psattn.textdata.tokens import held_out_files


def test_the_installed_corpus_is_every_python_file_of_stdlib_and_site_packages_once(tmp_path, monkeypatch):
    stdlib, site = tmp_path / "lib", tmp_path / "lib" / "site-packages"  # site-packages inside the stdlib, as pyenv has it
    (site / "pkg" / "sub").mkdir(parents=True)
    (stdlib / "os.py").write_text("import sys\n")
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / "pkg" / "sub" / "mod.py").write_text("def f():\n    return 'é'\n")
    (site / "pkg" / "latin.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    (site / "pkg" / "data.txt").write_text("not python\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(stdlib), "purelib": str(site), "platlib": str(site)})
    files = corpora.corpus_files("python-installed")
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "lib/os.py", "lib/site-packages/pkg/__init__.py", "lib/site-packages/pkg/latin.py", "lib/site-packages/pkg/sub/mod.py"]
    documents = corpora.load_documents("python-installed")  # the latin-1 file is left out, not an error
    assert [d.text for d in documents] == ["import sys\n", "x = 1\n", "def f():\n    return 'é'\n"]
    assert "3 files" in corpora.describe_corpus("python-installed")  # it counted the latin-1 file it leaves out


def test_a_virtual_environment_s_corpus_leaves_out_its_base_interpreter_s_packages(tmp_path, monkeypatch):
    """In a virtual environment the standard library's own site-packages is the base interpreter's, which the
    environment does not import from; the corpus took its packages too (this project's environment: a second
    sympy, 528 MB in all against 399)."""
    stdlib, base, venv = tmp_path / "lib", tmp_path / "lib" / "site-packages", tmp_path / "venv" / "site-packages"
    for site in (base, venv):
        (site / "pkg").mkdir(parents=True)
        (site / "pkg" / "__init__.py").write_text(f"where = {str(site)!r}\n")
    (stdlib / "os.py").write_text("import sys\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(stdlib), "purelib": str(venv), "platlib": str(venv)})
    files = [p.relative_to(tmp_path).as_posix() for p in corpora.python_installed_files()]
    assert files == ["lib/os.py", "venv/site-packages/pkg/__init__.py"]
    monkeypatch.syspath_prepend(str(base))  # a venv with include-system-site-packages imports from it: it counts
    assert len(corpora.python_installed_files()) == 3


def test_a_split_by_file_holds_out_whole_files_every_kth(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(8):
        (folder / f"doc{i}.txt").write_text(chr(ord("a") + i) * (50 + i))
    config = make_task_config("text", corpus=str(folder), seq_len=8, eval_fraction=0.25, split="file")
    tokens = config.tokens()
    held = "".join(chr(int(t)) for t in np.asarray(tokens.eval))
    train = "".join(chr(int(t)) for t in np.asarray(tokens.train))
    assert held == "d" * 53 + "h" * 57  # files 3 and 7 of 8, whole
    assert set(train) == set("abcefg") and len(train) == sum(50 + i for i in (0, 1, 2, 4, 5, 6))
    tail = make_task_config("text", corpus=str(folder), seq_len=8, eval_fraction=0.25).tokens()
    assert tail.directory != tokens.directory and set("".join(chr(int(t)) for t in np.asarray(tail.eval))) == set("abcdefgh")
    with pytest.raises(ValueError, match="holds out every 20th document, and the corpus has 3"):
        held_out_files(3, 0.05)
    with pytest.raises(ValueError, match="split must be one of"):
        make_task_config("text", corpus=str(folder), split="random")


def test_a_split_by_file_never_holds_out_a_copy_of_a_training_file(tmp_path):
    # a vendored copy (pip/_vendor/colorama beside colorama) held out while its twin trains is held-out text
    # seen in training: with doc7 a copy of doc0, every 4th of 8 files held doc7 out, and all of it was training text
    folder = tmp_path / "corpus"
    folder.mkdir()
    texts = [chr(ord("a") + i) * (50 + i) for i in range(7)] + ["a" * 50]
    for i, text in enumerate(texts):
        (folder / f"doc{i}.txt").write_text(text)
    tokens = make_task_config("text", corpus=str(folder), seq_len=8, eval_fraction=0.25, split="file").tokens()
    held = "".join(chr(int(t)) for t in np.asarray(tokens.eval))
    train = "".join(chr(int(t)) for t in np.asarray(tokens.train))
    assert held == "d" * 53  # of the 7 distinct files, the 4th; the copy of doc0 is dropped
    assert train == "".join(texts[i] for i in (0, 1, 2, 4, 5, 6))
    assert json.loads((tokens.directory / "meta.json").read_text())["copies_dropped"] == 1


def test_a_split_by_file_of_copies_alone_is_refused_naming_the_distinct_documents(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(8):
        (folder / f"doc{i}.txt").write_text("the same text\n" * 50)
    with pytest.raises(ValueError, match=r"every 4th document, and the corpus has 1 distinct documents \(exact copies"):
        make_task_config("text", corpus=str(folder), seq_len=8, eval_fraction=0.25, split="file").tokens()


def _installed_tree(root, monkeypatch, sizes):
    """A standard library holding site-packages with packages a..; file i of ``sizes`` is pkg{i}/mod.py."""
    stdlib, site = root / "lib", root / "lib" / "site-packages"
    for i, size in enumerate(sizes):
        (site / f"pkg{i}").mkdir(parents=True)
        (site / f"pkg{i}" / "mod.py").write_text(f"x{i} = 1\n" * (size // 7))  # 7 bytes a line, no two files alike
    (stdlib / "os.py").write_text("import sys\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(stdlib), "purelib": str(site), "platlib": str(site)})
    return site


def test_a_sample_of_the_installed_corpus_takes_files_in_a_fixed_order_up_to_its_size(tmp_path, monkeypatch):
    site = _installed_tree(tmp_path / "a", monkeypatch, [210_000] * 8)
    files = corpora.corpus_files("python-installed:1MB")
    assert len(files) in (4, 5) and files == sorted(files)  # 4 x 210 kB, and os.py's 11 bytes if its turn came in time
    assert sum(p.stat().st_size for p in files) <= 1_000_000
    picked = [p.relative_to(site.parent).as_posix() for p in files]
    assert picked != [p.relative_to(site.parent).as_posix() for p in corpora.corpus_files("python-installed")][:len(files)]
    _installed_tree(tmp_path / "b", monkeypatch, [210_000] * 8)  # the same packages elsewhere: the same files
    assert [p.relative_to(tmp_path / "b" / "lib").as_posix() for p in corpora.corpus_files("python-installed:1MB")] == picked
    assert corpora.absolute_corpus("python-installed:1MB") == "python-installed:1MB"  # a name, not a relative path
    assert "a sample of at most 1MB of the Python source" in corpora.describe_corpus("python-installed:1MB")
    assert len(corpora.load_documents("python-installed:1MB")) == len(files)
    config = make_task_config("text", corpus="python-installed:1MB", seq_len=8, eval_fraction=0.25, split="file")
    assert config.corpus == "python-installed:1MB" and len(config.tokens().train) > 0


@pytest.mark.parametrize("name", ["python-installed:0MB", "python-installed:1.5MB", "python-installed:1mb"])
def test_a_malformed_sample_size_is_no_corpus(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="python-installed:NMB, a sample of N megabytes"):
        corpora.corpus_files(name)


def test_the_installed_corpus_counts_a_linked_file_once_under_its_own_path(tmp_path, monkeypatch):
    # a .py link to a file outside the installation (an editable install's) stopped the sample with a bare
    # StopIteration: its resolved path lay under no folder of the installation
    site = _installed_tree(tmp_path, monkeypatch, [70, 70])
    outside = tmp_path / "elsewhere" / "tool.py"
    outside.parent.mkdir()
    outside.write_text("y = 2\n")
    (site / "pkg0" / "tool.py").symlink_to(outside)
    (site / "pkg1" / "hard.py").hardlink_to(site / "pkg0" / "mod.py")  # one file, two names: one document
    names = [p.relative_to(tmp_path / "lib").as_posix() for p in corpora.corpus_files("python-installed:1MB")]
    assert names == ["os.py", "site-packages/pkg0/mod.py", "site-packages/pkg0/tool.py", "site-packages/pkg1/mod.py"]
    assert corpora.corpus_files("python-installed") == corpora.corpus_files("python-installed:1MB")


def test_the_default_split_holds_out_each_documents_last_5_percent_or_every_20th_file():
    """docs/getting-started.md: "the last 5% of each document is held out (`task.split=file` holds out every 20th
    whole file instead)"; the defaults behind that sentence were checked nowhere."""
    from psattn.tasks.text import TextConfig
    from psattn.textdata.tokens import split_text

    defaults = TextConfig()
    assert (defaults.eval_fraction, defaults.split) == (0.05, "tail")
    train, held = split_text("x" * 1000, defaults.eval_fraction)  # no paragraph break to move the cut to
    assert (len(train), len(held)) == (950, 50)
    assert [i for i, out in enumerate(held_out_files(40, defaults.eval_fraction)) if out] == [19, 39]
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text().split())
    assert "the last 5% of each document is held out (`task.split=file` holds out every 20th whole file instead)" in page
