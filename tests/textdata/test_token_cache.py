"""The token cache verifies what it serves, and a text run is bound to the data it started on."""

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from psattn.tasks import make_task_config  # noqa: E402
from psattn.textdata import tokens as token_cache  # noqa: E402
from psattn.textdata.corpus import corpus_hash  # noqa: E402
from psattn.textdata.tokens import CorruptCache  # noqa: E402
from psattn.training.config import RunConfig, apply_overrides  # noqa: E402
from psattn.training.trainer import train  # noqa: E402


def corpus_folder(folder, text="def f(x):\n    return x + 1\n\n"):
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(2):
        (folder / f"doc{d}.txt").write_text(f"# document {d}\n\n" + text * 80)
    return folder


def entry(tmp_path, tokenizer="byte", vocab_size=256):
    corpus = str(corpus_folder(tmp_path / "corpus"))
    config = make_task_config("text", corpus=corpus, seq_len=16, tokenizer=tokenizer, vocab_size=vocab_size)
    return config, config.tokens()


def reopen(config):
    """The entry opened afresh, as a new process (a new config object) opens it."""
    token_cache._open.cache_clear()
    return dataclasses.replace(config).tokens()


def overwrite(path, array):
    """Replace the array stored in ``path`` by ``array`` (same dtype and shape unless told otherwise)."""
    path.chmod(0o644)
    np.save(path, array)


def test_meta_records_shapes_dtypes_checksums_and_the_tokenizer(tmp_path):
    _, corpus = entry(tmp_path)
    meta = json.loads((corpus.directory / "meta.json").read_text())
    assert meta["arrays"]["train"]["shape"] == [len(corpus.train)] and meta["arrays"]["train"]["dtype"] == "uint16"
    assert len(meta["arrays"]["eval"]["sha256"]) == 64 and len(meta["tokenizer_sha256"]) == 64
    assert corpus.fingerprint["corpus_sha256"] == meta["corpus_sha256"] != ""


def test_a_zero_filled_train_file_is_refused_naming_it(tmp_path):
    config, corpus = entry(tmp_path)
    overwrite(corpus.directory / "train.npy", np.zeros_like(np.asarray(corpus.train)))
    with pytest.raises(CorruptCache, match=r"train\.npy is corrupt: its SHA-256 differs.*Delete"):
        reopen(config)


def test_token_ids_beyond_the_vocabulary_are_refused(tmp_path):
    config, corpus = entry(tmp_path)
    path = corpus.directory / "eval.npy"
    tampered = np.asarray(corpus.eval).copy()
    tampered[3] = 300  # beyond the byte vocabulary
    overwrite(path, tampered)
    meta_path = corpus.directory / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["arrays"]["eval"]["sha256"] = token_cache._sha256(tampered)  # a consistent checksum: the id check catches it
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptCache, match=r"eval\.npy is corrupt: it holds token id 300, beyond the vocabulary of 256"):
        reopen(config)


def test_a_truncated_file_is_refused_naming_it(tmp_path):
    config, corpus = entry(tmp_path)
    path = corpus.directory / "train.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCache, match=r"train\.npy is corrupt: it cannot be read"):
        reopen(config)


def test_a_shorter_array_is_refused(tmp_path):
    config, corpus = entry(tmp_path)
    overwrite(corpus.directory / "train.npy", np.asarray(corpus.train)[:100])
    with pytest.raises(CorruptCache, match=r"holds uint16 \(100,\), meta.json says uint16"):
        reopen(config)


def test_a_tampered_tokenizer_is_refused(tmp_path):
    config, corpus = entry(tmp_path)
    path = corpus.directory / "tokenizer.json"
    path.write_text(path.read_text() + " ")
    with pytest.raises(CorruptCache, match=r"tokenizer\.json is corrupt"):
        reopen(config)


@pytest.mark.parametrize("spoil", ["deleted", "not text"])
def test_a_tokenizer_file_that_cannot_be_read_is_refused_naming_it(tmp_path, spoil):
    config, corpus = entry(tmp_path)
    path = corpus.directory / "tokenizer.json"
    path.unlink()
    if spoil == "not text":  # a UnicodeDecodeError named no file
        path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CorruptCache, match=r"tokenizer\.json is corrupt: it cannot be read.*Delete"):
        reopen(config)


def test_an_entry_without_meta_is_rebuilt(tmp_path):
    config, corpus = entry(tmp_path)
    train = np.asarray(corpus.train).copy()
    (corpus.directory / "meta.json").unlink()
    again = reopen(config)
    assert again.directory == corpus.directory and np.array_equal(np.asarray(again.train), train)


def test_staging_folders_of_dead_builds_are_removed_and_live_ones_kept(tmp_path):
    config, corpus = entry(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has exited
    stale = corpus.directory.parent / f"{corpus.directory.name}.staging-{pid}-abc"
    live = corpus.directory.parent / f"{corpus.directory.name}.staging-{os.getpid()}-xyz"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "train.npy").write_bytes(b"0" * 1000)
    reopen(config)
    assert not stale.exists() and live.exists()


def test_staging_folders_of_another_machine_are_kept(tmp_path):
    """On a cache in a shared home folder another machine's build is not among this one's processes: its staging
    folder was removed as abandoned while it built, and that build failed."""
    config, corpus = entry(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    name = f"{corpus.directory.name}.staging-{int(dead.stdout)}"
    mine, other = (corpus.directory.parent / f"{name}-{host}-abc" for host in (socket.gethostname(), "node-2"))
    for folder in (mine, other):
        folder.mkdir()
    reopen(config)
    assert not mine.exists() and other.exists()


def test_corpus_hash_separates_names_from_contents(tmp_path):
    """{a.txt, b.txt} and one a.txt holding their contents with b's name between must not collide."""
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.txt").write_text("first")
    (tmp_path / "two" / "b.txt").write_text("second")
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text("first" + "b.txt" + "second")
    assert corpus_hash(str(tmp_path / "two")) != corpus_hash(str(tmp_path / "one"))


def test_a_tokenizer_file_is_keyed_by_its_content(tmp_path):
    config, corpus = entry(tmp_path)
    saved = tmp_path / "tokenizer.json"
    saved.write_text(corpus.tokenizer.to_json())
    key = token_cache._tokenizer_key(str(saved), 256)
    code = ("from psattn.textdata.tokens import _tokenizer_key; import sys; "
            f"print(_tokenizer_key({str(saved)!r}, 256))")
    other_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other_process.stdout.strip() == key  # stable across processes (Python's hash() is not)


def text_run(tmp_path, corpus):
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(corpus), "seq_len": 16, "tokenizer": "bpe",
                                           "vocab_size": 300}, "model": {"vocab_size": 300}})
    return apply_overrides(config, ["model.d_model=32", "model.n_heads=2", "train.steps=6",
                                    "train.batch_size=2", "train.eval_every=3", "train.eval_size=4",
                                    "train.checkpoint_every=3", "train.threads=1", "train.device=cpu"])


def test_a_run_refuses_to_resume_on_a_changed_corpus(tmp_path, caplog):
    """One refusal in words, and no advice on task.vocab_size, which a resume cannot follow."""
    corpus = corpus_folder(tmp_path / "corpus")
    config = text_run(tmp_path, corpus)
    run_dir = tmp_path / "run"
    result = train(config, run_dir, time_limit_s=0)  # stops at the first step boundary, checkpoint kept
    assert result.timed_out and (run_dir / "data.json").exists()
    (corpus / "doc1.txt").write_text("class A:\n    pass\n\n" * 90)
    token_cache._open.cache_clear()
    caplog.clear()
    with pytest.raises(ValueError, match=r"started on other data: the corpus, its tokenizer, its held-out text and its "
                                         r"training text differ from what the run trained on \(its data\.json\)"):
        train(config, run_dir)
    assert "task.vocab_size" not in caplog.text
    token_cache._open.cache_clear()
    assert train(config, run_dir, resume=False).steps == 6  # a restart on the new data is allowed


def test_an_empty_psattn_cache_means_the_default_cache(monkeypatch, tmp_path):
    """PSATTN_CACHE="" would put the cache in ./text, where it hides the shipped config of that name."""
    monkeypatch.setenv("PSATTN_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert token_cache.cache_root() == tmp_path / ".cache" / "psattn"


@pytest.mark.parametrize("meta", ['{"format": 2}', '{"format": 2, "arrays": {}}', "[2]",
                                  '{"format": 2, "corpus_sha256": "x", "tokenizer_sha256": "y", "arrays": {"train": 1}}'])
def test_an_entry_with_a_partial_meta_is_rebuilt(tmp_path, meta):
    config, corpus = entry(tmp_path)
    train = np.asarray(corpus.train).copy()
    (corpus.directory / "meta.json").write_text(meta)
    again = reopen(config)
    assert np.array_equal(np.asarray(again.train), train)
    assert json.loads((again.directory / "meta.json").read_text())["arrays"]["train"]["shape"] == [len(train)]


BUILD = """
import json, sys
from psattn.tasks import make_task_config
config = make_task_config("text", corpus=sys.argv[1], seq_len=16, tokenizer="bpe", vocab_size=300)
print(json.dumps(config.tokens().fingerprint))
"""


def big_corpus(folder):
    """Enough text (300 kB) that a BPE build takes a moment (about a second) to kill."""
    folder.mkdir()
    words = [f"word{i} " * (1 + i % 7) for i in range(600)]
    for d in range(2):
        (folder / f"doc{d}.txt").write_text("\n\n".join(" ".join(words[j::(d + 2)]) for j in range(20)))
    return folder


def test_a_cache_build_killed_at_any_moment_leaves_no_entry_and_the_next_builds_it(tmp_path, cache_dir):
    corpus = big_corpus(tmp_path / "corpus")
    for delay in (0.0, 0.3):
        build = subprocess.Popen([sys.executable, "-c", BUILD, str(corpus)], stdout=subprocess.PIPE, text=True)
        while not list((cache_dir / "text").glob("*.staging-*")) and build.poll() is None:
            time.sleep(0.005)  # until the build has started
        time.sleep(delay)
        build.kill()
        build.wait()
        entries = [p for p in (cache_dir / "text").iterdir() if ".staging-" not in p.name]
        assert all((p / "meta.json").exists() for p in entries)  # whole, or not there
        token_cache._open.cache_clear()
    config = make_task_config("text", corpus=str(corpus), seq_len=16, tokenizer="bpe", vocab_size=300)
    built = config.tokens()
    assert len(built.train) > 0 and not list((cache_dir / "text").glob("*.staging-*"))


def test_two_processes_building_one_cache_entry_agree(tmp_path, cache_dir):
    corpus = big_corpus(tmp_path / "corpus")
    builds = [subprocess.Popen([sys.executable, "-c", BUILD, str(corpus)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    outputs = [b.communicate(timeout=300) for b in builds]
    assert [b.returncode for b in builds] == [0, 0], [err for _, err in outputs]
    first, second = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert first == second
    assert len(list((cache_dir / "text").iterdir())) == 1  # one entry, no staging folder left


def test_a_corpus_changed_while_tokenized_is_refused_and_never_cached_under_its_old_key(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("alpha beta gamma\n\n" * 50)
    load = token_cache.load_documents

    def edited_then_loaded(name):  # the file changes after the cache key is computed (an editor saving)
        corpus.write_text("zzzz yyyy xxxx\n\n" * 50)
        return load(name)

    monkeypatch.setattr(token_cache, "load_documents", edited_then_loaded)
    with pytest.raises(ValueError, match=r"corpus .*corpus\.txt changed while it was being tokenized"):
        token_cache.tokenize_corpus(str(corpus))
    monkeypatch.setattr(token_cache, "load_documents", load)
    corpus.write_text("alpha beta gamma\n\n" * 50)
    token_cache._open.cache_clear()
    assert bytes(token_cache.tokenize_corpus(str(corpus)).train[:16].tolist()) == b"alpha beta gamma"  # was B's


def test_an_entry_holding_another_corpus_is_refused_naming_it(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("zzzz yyyy xxxx\n\n" * 50)
    other = token_cache.tokenize_corpus(str(corpus)).directory
    corpus.write_text("alpha beta gamma\n\n" * 50)
    mine = other.parent / other.name.replace(other.name.split("-")[0], corpus_hash(str(corpus)))
    shutil.copytree(other, mine)  # A's key, B's tokens (what a corpus edited during its build left)
    token_cache._open.cache_clear()
    with pytest.raises(CorruptCache, match=r"meta\.json is corrupt: it holds the tokens of corpus [0-9a-f]{16}, not of"):
        token_cache.tokenize_corpus(str(corpus))


def test_docs_json_counts_every_document_whose_names_share_a_stem(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"notes.v{i}.txt").write_text(f"version {i}\n\n" * (10 + i))
    entry = token_cache.tokenize_corpus(str(folder))
    counts = json.loads((entry.directory / "docs.json").read_text())
    assert [os.path.basename(name) for name in counts] == ["notes.v0.txt", "notes.v1.txt", "notes.v2.txt"]  # was {"notes": ...}
    assert sum(train + held for train, held in counts.values()) == len(entry.train) + len(entry.eval)


def test_an_entry_rebuilt_by_another_process_after_this_one_found_it_stale_is_kept(tmp_path, monkeypatch):
    """Two processes open an entry of an older format at once: the second one's removal of what it read as stale
    must not remove the entry the first has built since (the first then read missing files)."""
    config, corpus = entry(tmp_path)
    directory, train = corpus.directory, np.asarray(corpus.train).copy()
    meta = json.loads((directory / "meta.json").read_text())
    (directory / "meta.json").write_text(json.dumps({**meta, "format": token_cache.FORMAT - 1}))
    args = (directory, config.corpus, "byte", 256, config.eval_fraction, "tail", corpus_hash(config.corpus))
    loads, rebuilt = json.loads, []

    def other_process_rebuilds(text):  # after this process read the stale meta.json, another one rebuilds it
        if not rebuilt:
            rebuilt.append(True)
            token_cache._open.__wrapped__(*args)
            (directory / "opened-by-the-other").touch()  # a mark of its entry (inode numbers are reused)
        return loads(text)

    monkeypatch.setattr(token_cache, "json", type("Json", (), {"loads": staticmethod(other_process_rebuilds),
                                                               "dumps": staticmethod(json.dumps)}))
    token_cache._open.cache_clear()
    mine = token_cache._open(*args)
    assert (directory / "opened-by-the-other").exists()  # the other process's entry is still there
    assert np.array_equal(np.asarray(mine.train), train)


def test_versions_of_two_formats_sharing_a_cache_keep_their_entries_side_by_side(tmp_path, monkeypatch):
    """Each removed the other's entry as stale and rebuilt it, at every run; versions of one format share it."""
    config, corpus = entry(tmp_path)
    shared, builds, this = corpus.directory, [], token_cache.FORMAT
    build = token_cache._build
    monkeypatch.setattr(token_cache, "_build", lambda *a, **k: builds.append(token_cache.FORMAT) or build(*a, **k))
    for version in (this + 1, this, this + 1, this):  # this version and one of the next format, in turn
        monkeypatch.setattr(token_cache, "FORMAT", version)
        opened = reopen(config)
        assert json.loads((opened.directory / "meta.json").read_text())["format"] == version
        assert np.array_equal(np.asarray(opened.train), np.asarray(corpus.train))
    assert builds == [this + 1] and opened.directory == shared  # one build, beside this version's entry
    monkeypatch.setattr(token_cache, "FORMAT", this + 1)
    assert reopen(config).directory.name == f"{shared.name}-format{this + 1}" and builds == [this + 1]


def test_a_kept_bpe_tokenizer_is_loaded_not_trained_and_gives_the_same_entry(tmp_path, monkeypatch, caplog):
    """A fresh machine given the tokenizer an earlier one trained (a GPU sweep's next piece) skips BPE training;
    training is deterministic, so the entry it builds is the one the earlier machine built, byte for byte."""
    config, first = entry(tmp_path, "bpe", 300)
    trained, meta = (first.directory / "tokenizer.json").read_text(), (first.directory / "meta.json").read_text()
    kept = token_cache.kept_tokenizer(first.directory)
    kept.parent.mkdir()
    kept.write_text(trained)
    shutil.rmtree(first.directory)  # the next machine's cache: the kept tokenizer alone
    monkeypatch.setattr(token_cache.BPETokenizer, "train", None)  # training would fail
    with caplog.at_level("INFO", logger="psattn.textdata.tokens"):
        again = reopen(config)
    assert "instead of training it" in caplog.text
    assert (again.directory / "meta.json").read_text() == meta
    assert np.array_equal(again.train, first.train) and np.array_equal(again.eval, first.eval)


def test_a_kept_tokenizer_that_is_not_bpe_is_refused_naming_it(tmp_path):
    config, first = entry(tmp_path, "bpe", 300)
    kept = token_cache.kept_tokenizer(first.directory)
    kept.parent.mkdir()
    kept.write_text(json.dumps({"kind": "byte"}))
    shutil.rmtree(first.directory)
    with pytest.raises(ValueError, match=f"{kept.name} is not a BPE tokenizer of at most 300 ids.*delete it"):
        reopen(config)


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_during_a_cache_build_removes_its_staging_folder(tmp_path, cache_dir, signum):
    """SIGTERM or SIGHUP while a corpus was tokenized ended the process on the spot and left the staging folder (the
    corpus's tokens so far) in the cache, for the next build on this machine to find: one on another machine sharing
    the cache kept it for good."""
    corpus = corpus_folder(tmp_path / "corpus")
    script = tmp_path / "build.py"
    script.write_text(f"""
import os, signal, sys
from psattn.tasks import make_task_config
from psattn.textdata import tokens

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
build = tokens._build

def stopped(documents, tokenizer, vocab_size, eval_fraction, out, *args):
    build(documents, tokenizer, vocab_size, eval_fraction, out, *args)
    os.kill(os.getpid(), signal.{signum})  # the entry written, not yet renamed into place

tokens._build = stopped
make_task_config("text", corpus=sys.argv[1], seq_len=16).tokens()
""")
    done = subprocess.run([sys.executable, str(script), str(corpus)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert list((cache_dir / "text").iterdir()) == []  # no staging folder, no entry


@pytest.mark.parametrize("fraction", [0, 0.0, 1.0, 1.5, -0.1, "0.1", True])
def test_an_eval_fraction_outside_zero_to_one_is_refused_before_anything_is_built(tmp_path, cache_dir, fraction):
    """0 held nothing out (split by file: a ZeroDivisionError), 1.5 cut every document before its start, and both
    were built and cached as entries."""
    corpus = str(corpus_folder(tmp_path / "corpus"))
    for split in ("tail", "file"):
        with pytest.raises(ValueError, match="eval_fraction must be a number in \\(0, 1\\), got"):
            token_cache.tokenize_corpus(corpus, eval_fraction=fraction, split=split)
    assert not (token_cache.cache_root() / "text").exists()
