"""The text task: corpora, tokenizers, the cached disjoint split, batches, LM metrics, and runs."""

import dataclasses
import gzip
import json
import lzma
import math
import os
import re
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from helpers import science, tiny_config
from psattn.models import AttentionConfig, ModelConfig
from psattn.models.heads import repeat_scores
from psattn.models.lm_eval import bits_per_byte, icl_score, icl_window, random_repeats, token_losses
from psattn.ops.hooks import HookPoint
from psattn.tasks import make_task_config, sample_task
from psattn.tasks.batch import TaskBatch
from psattn.textdata import tokens as token_cache
from psattn.textdata.corpus import corpus_files, corpus_hash, describe_corpus, load_documents
from psattn.textdata.tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer, tokenizer_from_json
from psattn.textdata.tokens import split_text
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.trainer import train

TEXT = "Héllo, wörld! It is a truth universally acknowledged.\nNew line — with a dash.\n"


def numbered_corpus(folder, docs=2, paragraphs=60):
    """Documents of unique numbered paragraphs, so any piece of text says where it came from."""
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(docs):
        body = "\n\n".join(f"Document {d} paragraph {p} says something of its own." for p in range(paragraphs))
        (folder / f"doc{d}.txt").write_text(body + "\n")
    return folder


def test_byte_tokenizer_round_trips_utf8():
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids) == TEXT
    assert isinstance(tokenizer_from_json(tok.to_json()), ByteTokenizer)


def test_bpe_tokenizer_round_trips_saves_and_counts_bytes(tmp_path):
    tok = BPETokenizer.train([TEXT * 20, "another line of text\n" * 20], vocab_size=300)
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    assert len(ids) < len(TEXT.encode())  # merges happened
    (tmp_path / "tokenizer.json").write_text(tok.to_json())
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert again.encode(TEXT) == ids
    assert int(tok.token_bytes()[ids].sum()) == len(TEXT.encode("utf-8"))


def test_bpe_batches_encode_as_each_text_alone():
    """encode_batch skips the offsets encode computes (tokenizers' encode_batch_fast); the ids must not change."""
    bpe = BPETokenizer.train([TEXT * 20], vocab_size=300)
    texts = [TEXT, "", "  \n\t  def f(x):\n        return x  # é ß 漢字 🙂", TEXT[::-1], " " * 17]
    assert bpe.encode_batch(texts) == [bpe.encode(t) for t in texts]


def test_bpe_training_is_deterministic():
    """The token cache loads a tokenizer trained elsewhere on the same corpus in place of training one: the same
    texts must give the same tokenizer."""
    texts = [TEXT * 20, "def f(x):\n    return x + 1\n" * 50, "é ß 漢字 " * 30]
    assert BPETokenizer.train(texts, 400).to_json() == BPETokenizer.train(list(texts), 400).to_json()


@pytest.mark.parametrize("vocab_size", [10, 256, -1, 300.0, True])
def test_bpe_training_refuses_a_vocabulary_without_merges_and_one_string_of_text(vocab_size):
    """10 and 256 gave the 256 bytes alone, -1 an OverflowError from the library; one string was fitted character
    by character, with no merge; a small text gives fewer ids than asked, never more."""
    with pytest.raises(ValueError, match=r"a BPE vocabulary needs 257 or more entries \(256 bytes plus merges\), got"):
        BPETokenizer.train([TEXT * 20], vocab_size)
    with pytest.raises(TypeError, match="texts must be an iterable of texts"):
        BPETokenizer.train(TEXT * 20, 300)
    assert 256 < BPETokenizer.train(["ab ab ab"], 1000).vocab_size < 1000


def test_both_tokenizers_refuse_to_decode_ids_outside_their_vocabulary():
    """The BPE library decoded an id past its vocabulary as nothing at all and -1 as an OverflowError; the byte
    tokenizer said "bytes must be in range(0, 256)"."""
    bpe = BPETokenizer.train([TEXT * 20], vocab_size=300)
    for tok in (ByteTokenizer(), bpe):
        for ids in ([104, tok.vocab_size], [-1, 104], [10**6]):
            with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {tok.vocab_size}\) \(the tokenizer's "
                                                 r"vocabulary\), got ids from"):
                tok.decode(ids)
        assert tok.decode(tok.encode("hi")) == "hi" and tok.decode([]) == ""


def test_text_that_is_not_utf8_is_named_by_both_tokenizers():
    """A lone surrogate (what Python makes of a command-line argument that is not UTF-8, as in psattn generate --prompt)
    raised the BPE library's 'TypeError: TextInputSequence must be str' as a traceback, and the byte tokenizer's codec
    error; both now name the character."""
    bpe = BPETokenizer.train([TEXT * 20], vocab_size=300)
    for encode in (ByteTokenizer().encode, bpe.encode, lambda text: bpe.encode_batch(["ok", text])):
        with pytest.raises(ValueError, match=r"holds '\\udcff' at character 2, a lone surrogate .*give UTF-8 text"):
            encode("ab\udcff")
    assert bpe.decode(bpe.encode_batch(["ok", TEXT])[1]) == TEXT


def test_tokenizer_file_errors_are_clear(tmp_path):
    (tmp_path / "t.json").write_text('{"kind": "wordpiece"}')
    with pytest.raises(ValueError, match="not a psattn tokenizer"):
        load_tokenizer(tmp_path / "t.json")
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_tokenizer(tmp_path / "missing.json")


@pytest.mark.parametrize("text,message", [
    ("{bad", "is not valid JSON"),  # was json's 'Expecting property name ...', naming no file
    ('{"kind": "byte", "kind": "bpe"}', "gives the key 'kind' twice"),  # was KeyError: 'tokenizer'
    ('{"kind": "bpe"}', "says kind 'bpe' but holds no 'tokenizer' object"),  # was KeyError: 'tokenizer'
    ('{"kind": "bpe", "tokenizer": {"model": 1}}', "holds a BPE tokenizer the tokenizers library cannot read"),  # Exception
    (None, "is not a regular file"),  # a folder: was IsADirectoryError
])
def test_a_tokenizer_file_that_is_no_tokenizer_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.mkdir() if text is None else path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_tokenizer(path)
    (tmp_path / "doc.txt").write_text(TEXT)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*{message}" if text is not None else message):
        make_task_config("text", corpus=str(tmp_path / "doc.txt"), tokenizer=str(path), seq_len=16).tokens()


def test_the_shipped_corpus_is_six_novels_of_real_prose():
    docs = load_documents("austen")
    assert len(docs) == 6
    assert sum(len(d.text.split()) for d in docs) > 700_000
    assert docs[1].text.startswith("PRIDE AND PREJUDICE")


def test_the_prose_commands_text_md_quotes_train_the_models_and_corpus_it_describes():
    """docs/text.md called the two plain layers of its commands "almost twice" the parameters of the one
    key-sheared layer; with the MLPs those commands keep, they have 43% more (657,920 against 460,160). The
    corpus sizes it gives (1.16M BPE training tokens, read 30 to 45 times) come from the same commands."""
    import shlex

    from psattn.training.run_dir import build_model

    page = (Path(__file__).resolve().parents[2] / "docs" / "text.md").read_text()
    commands = re.findall(r"^psattn train --run-dir runs/austen-\S+ --set (.*)$", page, flags=re.MULTILINE)
    configs = [apply_overrides(RunConfig(), shlex.split(command)) for command in commands]
    assert [(c.model.n_layers, c.model.attention.variant, c.model.mlp) for c in configs] == [
        (1, "key_only", True), (2, "baseline", True)]
    counts = [build_model(c).num_parameters() for c in configs]
    assert counts == [460_160, 657_920] and round(counts[1] / counts[0] - 1, 2) == 0.43
    assert "with 43% more parameters (657,920 against 460,160)" in " ".join(page.split())
    train_tokens = len(configs[0].task.tokens().train)
    reads = [c.train.steps * c.train.batch_size * c.task.seq_len / train_tokens for c in configs]
    assert round(train_tokens / 1e6, 2) == 1.16 and [round(r) for r in reads] == [44, 32]
    assert "(1.16M BPE training tokens, so those runs see it 30 to 45 times;" in " ".join(page.split())


def test_the_python_stdlib_corpus_is_this_interpreters_source_code():
    files = corpus_files("python-stdlib")
    assert len(files) > 100 and all(p.suffix == ".py" for p in files) and files == sorted(files)
    assert {p.parent for p in files} == {Path(sysconfig.get_paths()["stdlib"])}
    docs = load_documents("python-stdlib")
    assert [d.name for d in docs][:3] == [p.name.split(".")[0] for p in files][:3]
    assert sum("def " in d.text for d in docs) > 100
    assert describe_corpus("python-stdlib").startswith(f"the source of Python {sys.version_info.major}.")


def test_split_cuts_at_a_paragraph_and_loses_nothing():
    text = "\n\n".join(f"paragraph {i} " + "x" * 50 for i in range(100))
    train_part, held = split_text(text, 0.1)
    assert train_part + held == text
    assert held.startswith("paragraph ") and train_part.endswith("\n\n")
    assert 0.05 < len(held) / len(text) < 0.15


def test_split_cuts_at_a_paragraph_of_text_with_windows_line_ends():
    """A blank line is \r\n\r\n there, which holds no \n\n: the cut fell mid-word ('gins here and ...')."""
    paragraphs = [f"Paragraph {i} begins here and runs on for a while, saying a few things of its own." for i in range(40)]
    for newline in ("\n", "\r\n"):
        text = (newline * 2).join(paragraphs) + newline
        train_part, held = split_text(text, 0.07)
        assert train_part + held == text and train_part.endswith(newline * 2)
        assert held.startswith("Paragraph 37 begins")


@pytest.mark.parametrize("tokenizer, vocab", [("byte", 256), ("bpe", 300)])
def test_held_out_text_is_disjoint_from_training_text(tmp_path, tokenizer, vocab):
    corpus = str(numbered_corpus(tmp_path / "corpus"))
    config = make_task_config("text", corpus=corpus, tokenizer=tokenizer, vocab_size=vocab, seq_len=32,
                              eval_fraction=0.1)
    data = config.tokens()
    decode = data.tokenizer.decode
    train_paragraphs = set(decode(data.train).split("\n\n"))
    eval_paragraphs = set(decode(data.eval).split("\n\n"))
    assert not (train_paragraphs & eval_paragraphs - {""})
    # every document gives its last paragraphs to held-out text, and nothing is lost
    assert {p.split(" paragraph")[0] for p in eval_paragraphs if p} == {"Document 0", "Document 1"}
    assert len(train_paragraphs | eval_paragraphs - {""}) == 120
    # training windows hold only training text
    held_ids = [p.split(" says")[0] + " says" for p in eval_paragraphs if p]
    for step in range(20):
        batch = sample_task(config, 8, torch.Generator().manual_seed(step))
        for row in batch.inputs:
            assert not any(i in decode(row.tolist()) for i in held_ids)


def test_tokens_are_cached_and_reused(tmp_path, cache_dir, monkeypatch):
    corpus = str(numbered_corpus(tmp_path / "corpus"))
    config = make_task_config("text", corpus=corpus, seq_len=16)
    first = config.tokens()
    assert first.train.dtype == np.uint16 and isinstance(first.train, np.memmap)
    token_cache._open.cache_clear()
    monkeypatch.setattr(token_cache, "_build", lambda *a: pytest.fail("tokenized twice"))
    again = config.tokens()
    assert again.directory == first.directory and np.array_equal(again.train, first.train)
    assert first.directory.parent.parent == cache_dir
    # another corpus gets another entry
    (tmp_path / "corpus" / "doc0.txt").write_text("changed\n\n" * 200)
    assert corpus_hash(corpus) not in first.directory.name


def test_every_eval_fraction_has_its_own_cache_entry(tmp_path):
    corpus = str(numbered_corpus(tmp_path / "corpus"))
    near = [token_cache.tokenize_corpus(corpus, eval_fraction=f) for f in (0.3, 0.3000001)]
    assert near[0].directory != near[1].directory
    for opened, fraction in zip(near, (0.3, 0.3000001), strict=True):
        assert json.loads((opened.directory / "meta.json").read_text())["eval_fraction"] == fraction
    assert token_cache.tokenize_corpus(corpus).directory.name.endswith("-0.05")  # the usual keys stay as they were


def test_held_out_text_may_repeat_training_text_as_the_tasks_docstring_says(tmp_path):
    """Positions are disjoint, contents need not be: every paragraph ends "says something of its own.", held
    out or not."""
    import psattn.tasks

    config = make_task_config("text", corpus=str(numbered_corpus(tmp_path / "corpus")), seq_len=16, eval_fraction=0.1)
    train_text = config.tokens().tokenizer.decode(config.tokens().train)
    held = sample_task(config, 64, torch.Generator().manual_seed(0), "eval").inputs
    rows = [ByteTokenizer().decode(r) for r in held.tolist()]
    assert any(r in train_text for r in rows) and not (held[:, 0] == 0).all()  # repeated text; no BOS
    doc = " ".join(psattn.tasks.__doc__.split())
    assert "its tokens may occur in the training text too" in doc and "with no BOS" in doc


def test_corpus_paths_a_file_a_folder_and_a_token_file(tmp_path):
    folder = numbered_corpus(tmp_path / "corpus")
    one = make_task_config("text", corpus=str(folder / "doc0.txt"), seq_len=16).tokens()
    both = make_task_config("text", corpus=str(folder), seq_len=16).tokens()
    assert 0 < len(one.train) < len(both.train)
    np.save(tmp_path / "tokens.npy", np.arange(1000) % 256)
    tokens = make_task_config("text", corpus=str(tmp_path / "tokens.npy"), seq_len=16).tokens()
    assert len(tokens.train) == 950 and tokens.eval[0] == 950 % 256
    with pytest.raises(FileNotFoundError, match="neither a named corpus"):
        make_task_config("text", corpus=str(tmp_path / "nothing"), seq_len=16).tokens()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds no text files .*give a pattern, e\.g\. task\.corpus="):
        make_task_config("text", corpus=str(tmp_path / "empty"), seq_len=16).tokens()


@pytest.mark.parametrize("name,damage", [("a.txt.gz", lambda z: z[:40]), ("a.txt.xz", lambda z: z[:40]),
                                         ("a.txt.gz", lambda z: b"not gzip"), ("a.txt.xz", lambda z: b"not xz")])
def test_a_compressed_corpus_cut_short_or_corrupt_is_one_line_naming_it(tmp_path, name, damage):
    """lzma's LZMAError was a traceback, gzip's EOFError / BadGzipFile named no file."""
    text = ("a line of text " * 400).encode()
    (tmp_path / name).write_bytes(damage(gzip.compress(text) if name.endswith("gz") else lzma.compress(text)))
    with pytest.raises(ValueError, match=f"{tmp_path / name} is not a whole .{name[-2:]} archive"):
        load_documents(str(tmp_path / name))


@pytest.mark.parametrize("content", [b"garbage, no array", None])
def test_a_token_file_that_is_no_array_is_named(tmp_path, content):
    """numpy said 'This file contains pickled (object) data. If you trust the file ...', naming no file."""
    path = tmp_path / "tokens.npy"
    if content is None:
        np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=f"token file {path} is not a .npy array"):
        load_documents(str(path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_corpus_that_is_no_regular_file_is_refused_before_it_is_read(tmp_path):
    """A corpus is read twice (hashed, then tokenized): /dev/zero filled the memory, a pipe (a shell's <(...)) blocked."""
    os.mkfifo(tmp_path / "pipe.txt")
    for path in (tmp_path / "pipe.txt", Path(os.devnull)):
        with pytest.raises(ValueError, match=f"corpus {path} is not a regular file"):
            corpus_files(str(path))  # only looks: nothing is opened
        with pytest.raises(ValueError, match="not a regular file"):
            make_task_config("text", corpus=str(path), seq_len=16).tokens()


def test_a_pattern_or_a_source_file_is_a_corpus(tmp_path):
    """A code base is a corpus without renaming: a glob reaching into subfolders, or one .py file."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("def a():\n    return 1\n" * 40)
    (tmp_path / "src" / "pkg" / "b.py").write_text("class B:\n    pass\n" * 40)
    (tmp_path / "src" / "pkg" / "notes.md").write_text("not code\n" * 40)
    files = corpus_files(str(tmp_path / "src" / "**" / "*.py"))
    assert [f.name for f in files] == ["a.py", "b.py"]
    both = make_task_config("text", corpus=str(tmp_path / "src" / "**" / "*.py"), seq_len=16).tokens()
    one = make_task_config("text", corpus=str(tmp_path / "src" / "a.py"), seq_len=16).tokens()
    assert 0 < len(one.train) < len(both.train)
    with pytest.raises(ValueError, match="matches no files"):
        corpus_files(str(tmp_path / "src" / "*.rs"))


def test_text_config_refuses_bad_values():
    for fields, match in [({"tokenizer": "word"}, "tokenizer"), ({"vocab_size": 300}, "byte tokenizer"),
                          ({"tokenizer": "bpe", "vocab_size": 100}, "BPE"), ({"seq_len": 1}, "seq_len"),
                          ({"seq_len": 3}, r"seq_len must be an integer >= 4 \(the copy measures repeat seq_len // 2 "
                                           r">= 2 tokens\), got 3"),
                          ({"eval_fraction": 0.7}, "eval_fraction")]:
        with pytest.raises(ValueError, match=match):
            make_task_config("text", **fields)


def test_text_config_takes_numpy_sizes_and_fractions_as_the_synthetic_tasks_do():
    config = make_task_config("text", seq_len=np.int64(128), vocab_size=np.int64(256), eval_fraction=np.float32(0.25))
    assert (config.seq_len, config.vocab_size, config.eval_fraction) == (128, 256, 0.25)  # were refused, "must be an integer"
    assert (type(config.seq_len), type(config.vocab_size), type(config.eval_fraction)) == (int, int, float)
    assert config == make_task_config("text", seq_len=128, eval_fraction=0.25)


def test_batches_are_next_token_windows_drawn_from_the_generator_alone(tmp_path):
    config = make_task_config("text", corpus=str(numbered_corpus(tmp_path / "corpus")), seq_len=24)
    a = sample_task(config, 4, torch.Generator().manual_seed(3))
    b = sample_task(config, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.inputs[:, 1:], a.targets[:, :-1])  # targets are the inputs shifted by one
    stream = config.tokens().train
    row = a.inputs[0].numpy()
    starts = [s for s in range(len(stream) - 24) if np.array_equal(stream[s : s + 24], row)]
    assert starts  # a window of the training stream


def test_switching_task_by_name_takes_its_defaults_and_vocabulary():
    config = apply_overrides(RunConfig(), ["task.name=mqar"])
    assert type(config.task).__name__ == "AssociativeRecallConfig"
    assert config.model.vocab_size == config.task.vocab_size
    text = apply_overrides(RunConfig(), ["task.seq_len=64", "task.name=text"])
    assert text.task.seq_len == 64 and text.model.vocab_size == 256
    explicit = apply_overrides(RunConfig(), ["task.name=text", "model.vocab_size=512"])
    assert explicit.model.vocab_size == 512


def test_icl_score_and_bits_per_byte_on_known_cases():
    early, late = icl_window(256)
    assert (early.start, early.stop, late.start, late.stop) == (16, 32, 224, 256)
    losses = torch.full((256,), 3.0)
    losses[list(late)] = 1.0
    assert icl_score(losses) == pytest.approx(-2.0)
    assert icl_score(torch.full((64,), 2.0)) == 0.0
    token_bytes = np.array([1, 2, 3])
    targets = torch.tensor([[0, 1, 2]])
    assert bits_per_byte(torch.full((1, 3), math.log(2)), targets, token_bytes) == pytest.approx(3 / 6)


def test_the_lm_metrics_name_an_argument_that_is_no_tensor():
    """bits_per_byte of a float or a list raised an AttributeError ('float' object has no attribute 'shape'), of float
    targets torch's IndexError, of token_bytes None "object of type 'NoneType' has no len()"; icl_score of a list an
    AttributeError too."""
    targets, token_bytes = torch.tensor([[0, 1, 2]]), np.array([1, 2, 3])
    for losses in (1.5, [[1.0, 1.0, 1.0]]):
        named = rf"^bits_per_byte's losses must be a torch.Tensor \(B, T\), got {type(losses).__name__}$"
        with pytest.raises(TypeError, match=named):
            bits_per_byte(losses, targets, token_bytes)
    with pytest.raises(TypeError, match=r"^bits_per_byte's targets must be a torch.Tensor \(B, T\), got list$"):
        bits_per_byte(torch.ones(1, 3), [[0, 1, 2]], token_bytes)
    with pytest.raises(TypeError, match=r"^bits_per_byte's targets must be integer token ids, got torch.float32$"):
        bits_per_byte(torch.ones(1, 3), targets.float(), token_bytes)
    for table in (None, 3, np.ones((2, 3), dtype=np.int64), np.array(["a", "b", "c"])):  # None: "has no len()"
        with pytest.raises(TypeError, match=r"^bits_per_byte's token_bytes must be a 1-D array of each token id's"):
            bits_per_byte(torch.ones(1, 3), targets, table)
    assert bits_per_byte(torch.full((1, 3), math.log(2)), targets, [1, 2, 3]) == pytest.approx(3 / 6)  # a list too
    with pytest.raises(TypeError, match=r"^icl_score's position_loss must be a torch.Tensor \(T,\), got list$"):
        icl_score([1.0] * 64)


def test_bits_per_byte_of_targets_that_score_nothing_is_refused():
    """Targets that were all IGNORE_INDEX gave 0.0 bits per byte (the clamped denominator), a perfect score."""
    with pytest.raises(ValueError, match=r"targets \(2, 3\) score no bytes .*bits per byte would mean nothing"):
        bits_per_byte(torch.full((2, 3), 5.0), torch.full((2, 3), -100), np.ones(256, dtype=np.int64))
    with pytest.raises(ValueError, match="score no bytes"):
        bits_per_byte(torch.zeros(0, 4), torch.zeros(0, 4, dtype=torch.long), np.ones(256, dtype=np.int64))


def test_a_bfloat16_model_is_scored_in_float32():
    """A bfloat16 model's losses were computed and returned in bfloat16: bits per byte 8.1875 against 8.2229 from its
    own logits, ICL score 0.0625 against 0.0589, and both copy losses of R + R 5.6875, a copy gain of 0 against 0.0059."""
    from psattn import DecoderLM

    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=256, d_model=64, n_heads=2)).to(torch.bfloat16).eval()
    rows = torch.randint(0, 256, (64, 65), generator=torch.Generator().manual_seed(1))  # (B, T + 1)
    batch = TaskBatch(rows[:, :-1], rows[:, 1:])
    with torch.no_grad():
        logits = model(batch.inputs).double()  # (B, T, V)
    exact = nn.functional.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")  # (B, T)
    losses = token_losses(model, batch)
    assert losses.dtype == torch.float32
    torch.testing.assert_close(losses.double(), exact, atol=1e-5, rtol=0)
    assert bits_per_byte(losses, batch.targets, np.ones(256, dtype=np.int64)) == pytest.approx(
        float(exact.mean()) / math.log(2), rel=1e-6)
    repeated = torch.cat([rows[:, :32], rows[:, :32]], dim=1)  # (B, 64): R + R
    copies = repeat_scores(model, repeated, 32)
    with torch.no_grad():
        logits = model(repeated).double()  # (B, 64, V)
    first, second = (nn.functional.cross_entropy(logits[:, start : start + 31].transpose(1, 2), rows[:, 1:32]).item()
                     for start in (0, 32))  # predictions of tokens 1..31 of each copy
    assert copies.first_copy_loss == pytest.approx(first, rel=1e-4)
    assert copies.first_copy_loss - copies.second_copy_loss == pytest.approx(first - second, abs=1e-4)


def test_icl_windows_are_the_positions_in_their_documented_intervals():
    """Early is [T/16, T/8) and late [7T/8, T): at T = 100 the early window was positions 6-11 instead of 7-12 (the
    late one was right, 88-99)."""
    for T in (3, 4, 8, 17, 24, 100, 256, 1000):
        early, late = icl_window(T)
        if T >= 16:  # below, the windows are one position each, at 1 and T - 1
            assert list(early) == [t for t in range(T) if T / 16 <= t < T / 8], T
        assert list(late) == [t for t in range(T) if 7 * T / 8 <= t < T] or T < 8, T
        assert early.start >= 1 and len(early) and len(late) and early.stop <= late.start


@pytest.mark.parametrize("chunk,error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_token_losses_names_a_chunk_that_is_no_positive_integer(chunk, error):
    """0 was range()'s 'arg 3 must not be zero', -1 torch.cat's 'expected a non-empty list of Tensors'; 1.5 and True,
    type mistakes, were ValueErrors and are TypeErrors."""
    batch = sample_task(make_task_config("induction"), 2, torch.Generator().manual_seed(0))
    with pytest.raises(error, match=f"chunk must be an integer >= 1 .*got {chunk!r}"):
        token_losses(nn.Identity(), batch, chunk=chunk)


def test_a_forward_pass_that_raises_leaves_a_training_model_in_training_mode():
    """token_losses and repeat_scores switch the model to eval mode; a failed forward pass left it there."""
    from psattn.models import DecoderLM
    from psattn.tasks.batch import TaskBatch

    model = DecoderLM(ModelConfig(vocab_size=16, d_model=32, n_heads=2)).train()
    rows = torch.full((2, 9), 99)  # past the vocabulary: the forward pass raises
    for call in (lambda: token_losses(model, TaskBatch(inputs=rows, targets=rows)), lambda: repeat_scores(model, rows, 4)):
        with pytest.raises(ValueError, match="token ids in"):
            call()
        assert model.training


def test_bits_per_byte_leaves_unscored_positions_out_and_names_ids_beyond_the_tokenizer():
    """A target of -100 (unscored) was read as token V - 100: its bytes entered the count, the value was wrong."""
    token_bytes = np.array([1] * 255 + [50])
    losses = torch.tensor([[1.0, 1.0, 7.0]])
    scored_only = bits_per_byte(losses[:, :2], torch.tensor([[5, 6]]), token_bytes)
    assert bits_per_byte(losses, torch.tensor([[5, 6, -100]]), token_bytes) == pytest.approx(scored_only)
    with pytest.raises(ValueError, match=r"targets must be token ids in \[0, 256\).*got ids from 5 to 300"):
        bits_per_byte(losses, torch.tensor([[5, 6, 300]]), token_bytes)  # was an IndexError


class PatternModel(nn.Module):
    """A stand-in model whose one head attends where it is told, and predicts uniformly."""

    def __init__(self, attend, vocab=10):
        super().__init__()
        self.attend, self.vocab = attend, vocab
        self.blocks = nn.ModuleList([nn.Module()])
        self.blocks[0].attn = nn.Module()
        self.blocks[0].attn.hook_pattern = HookPoint()

    def forward(self, tokens):
        B, T = tokens.shape
        pattern = torch.zeros(B, 1, T, T)
        for t in range(T):
            pattern[:, 0, t, self.attend(t)] = 1.0
        self.blocks[0].attn.hook_pattern(pattern)
        return torch.zeros(B, T, self.vocab)


def test_random_repeats_from_an_empty_vocabulary_is_one_line():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="at least one token id"):
        random_repeats(torch.zeros(0, dtype=torch.long), 4, 8, g)
    rows = random_repeats(torch.tensor([3, 5]), 4, 8, g)  # (4, 16) R + R
    assert rows.shape == (4, 16) and torch.equal(rows[:, :8], rows[:, 8:]) and set(rows.unique().tolist()) <= {3, 5}


def test_induction_and_previous_token_scores_on_hand_built_heads():
    half = 6
    rows = torch.randint(0, 10, (3, half)).repeat(1, 2)
    induction_head = repeat_scores(PatternModel(lambda t: t - half + 1 if t >= half else 0), rows, half)
    assert induction_head.induction.item() == 1.0
    previous_head = repeat_scores(PatternModel(lambda t: max(t - 1, 0)), rows, half)
    assert previous_head.previous_token.item() == 1.0 and previous_head.induction.item() == 0.0
    assert induction_head.first_copy_loss == pytest.approx(math.log(10))


class ScriptedModel(nn.Module):
    """A two-layer stand-in whose answers are known: layer 1 attends to the previous token, layer 2 to t - T/2 + 1
    (an induction head on an R + R row of T tokens); its logits copy on such rows (the token at t - T/2 + 1 from the
    second copy on, uniform before), and on ``held_out``'s rows put ``confidence[t]`` on the target at position t
    (a loss of log(e^a + V - 1) - a whatever the target)."""

    def __init__(self, held_out: TaskBatch, confidence: torch.Tensor, vocab: int = 256):
        super().__init__()
        self.held_out, self.confidence, self.vocab = held_out, confidence, vocab
        self.weight = nn.Parameter(torch.zeros(1))  # a device to be on
        self.blocks = nn.ModuleList([nn.Module(), nn.Module()])
        for block in self.blocks:
            block.attn = nn.Module()
            block.attn.hook_pattern = HookPoint()

    def forward(self, tokens):
        B, T = tokens.shape
        half, t = T // 2, torch.arange(T)
        for layer, attend in enumerate(((t - 1).clamp(min=0), torch.where(t >= half, t - half + 1, 0))):
            pattern = torch.zeros(B, 1, T, T)
            pattern[:, 0, t, attend] = 1.0
            self.blocks[layer].attn.hook_pattern(pattern)
        logits = torch.zeros(B, T, self.vocab)
        if torch.equal(tokens, self.held_out.inputs):
            logits.scatter_(2, self.held_out.targets[..., None], self.confidence.expand(B, T)[..., None])
        else:
            second = t[half:-1]  # positions predicting tokens 1..half-1 of the second copy: the token at t - half + 1
            logits[torch.arange(B)[:, None], second, tokens[:, second - half + 1]] = 40.0
        return logits


def test_text_metrics_of_a_scripted_model_are_its_known_answers(tmp_path):
    """Every column of a text run's evaluation against a hand computation: the keys only were checked, so scores
    read at the wrong position, the losses averaged over rows instead of positions, or a copy's window off by one
    went unseen."""
    from psattn.models.lm_eval import text_metrics

    config = text_run(tmp_path).task
    T, V = config.seq_len, 256
    held_out = sample_task(config, 6, torch.Generator().manual_seed(0), split="eval")
    confidence = torch.linspace(0.0, 9.3, T)  # later positions are predicted better
    model = ScriptedModel(held_out, confidence, V)
    metrics = text_metrics(model, config, held_out, probe_rows=4)
    loss = [math.log(math.exp(a) + V - 1) - a for a in confidence.tolist()]  # at each position, any target
    early = [loss[t] for t in range(T) if T / 16 <= t < T / 8]
    late = [loss[t] for t in range(T) if 7 * T / 8 <= t < T]
    assert metrics["icl_score"] == pytest.approx(sum(late) / len(late) - sum(early) / len(early), rel=1e-5)
    assert metrics["position_loss"] == pytest.approx(loss, abs=1e-4)
    assert metrics["bits_per_byte"] == pytest.approx(sum(loss) / T / math.log(2), rel=1e-5)  # one byte a token
    for probe in ("random", "passage"):
        assert metrics[f"{probe}_first_loss"] == pytest.approx(math.log(V), rel=1e-6)  # uniform inside the first copy
        assert metrics[f"{probe}_second_loss"] == pytest.approx(0.0, abs=1e-9)  # copied inside the second
    assert metrics["induction_score"] == metrics["prefix_matching_score"] == [[0.0], [1.0]]
    assert metrics["previous_token_score"][0] == [1.0]
    assert metrics["previous_token_score"][1] == [pytest.approx(1 / (T - 1))]  # t = 1 looks at 0 for both reasons


def test_uniform_attention_scores_what_uniform_score_says():
    """The level the phase-change plots draw for uniform attention is what repeat_scores measures of it."""
    from psattn.experiments.phase_change import uniform_score

    class Uniform(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Module()])
            self.blocks[0].attn = nn.Module()
            self.blocks[0].attn.hook_pattern = HookPoint()

        def forward(self, tokens):
            B, T = tokens.shape
            causal = torch.ones(T, T).tril()
            self.blocks[0].attn.hook_pattern((causal / causal.sum(-1, keepdim=True)).expand(B, 1, T, T))
            return torch.zeros(B, T, 10)

    for context in (8, 64, 256):
        rows = torch.randint(0, 10, (2, context // 2), generator=torch.Generator().manual_seed(0)).repeat(1, 2)
        measured = repeat_scores(Uniform(), rows, context // 2).induction.item()
        assert measured == pytest.approx(uniform_score(context), rel=1e-5)
        assert measured == pytest.approx(math.log(2) / (context // 2), rel=0.1 if context > 8 else 0.3)


def test_the_induction_score_reads_the_first_copy_not_the_most_recent_occurrence():
    """The docstrings said "the token after its previous occurrence"; the score reads t - n + 1, the token after the
    occurrence in the first copy, which differs where R repeats a token: a head that follows the most recent
    occurrence scores 0.5 on R = 3 5 3 7 (the second copy's 3s look back to the first copy's second 3)."""
    half = 4
    rows = torch.tensor([[3, 5, 3, 7] * 2])  # (1, 8): R + R, 3 twice in R

    def most_recent(t):
        earlier = [j for j in range(t) if rows[0, j] == rows[0, t]]
        return earlier[-1] + 1 if earlier else 0

    assert [most_recent(t) for t in range(half, 2 * half)] == [3, 2, 5, 4]  # first copy: 1, 2, 3, 4
    assert repeat_scores(PatternModel(most_recent), rows, half).induction.item() == 0.5
    assert repeat_scores(PatternModel(lambda t: max(t - half + 1, 0)), rows, half).induction.item() == 1.0


def test_repeat_scores_take_int32_rows_as_the_model_does():
    """DecoderLM takes int32 ids; the copy losses raised torch's 'expected target dtype to be Long'."""
    from psattn import DecoderLM

    model = DecoderLM(ModelConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2))
    rows = torch.randint(0, 30, (2, 4), generator=torch.Generator().manual_seed(0)).repeat(1, 2)
    wide, narrow = repeat_scores(model, rows, 4), repeat_scores(model, rows.int(), 4)
    assert (narrow.first_copy_loss, narrow.second_copy_loss) == (wide.first_copy_loss, wide.second_copy_loss)
    assert torch.equal(narrow.induction, wide.induction)


def text_run(tmp_path, steps=6):
    corpus = str(numbered_corpus(tmp_path / "corpus", paragraphs=40))
    config = tiny_config(steps, eval_every=3, checkpoint_every=3, eval_size=8, batch_size=4)
    return RunConfig(model=ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2,
                                       attention=AttentionConfig("key_only", 1.0)),
                     task=make_task_config("text", corpus=corpus, seq_len=32), train=config.train)


def test_a_text_run_logs_lm_metrics_keeps_its_tokenizer_and_resumes_exactly(tmp_path):
    config = text_run(tmp_path)
    whole = train(config, tmp_path / "whole")
    assert (tmp_path / "whole" / "tokenizer.json").exists()
    row = json.loads((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("bits_per_byte", "icl_score", "position_loss", "random_second_loss", "induction_score",
                "passage_second_loss", "prefix_matching_score"):
        assert key in row
    assert len(row["position_loss"]) == 32 and row["bits_per_byte"] == pytest.approx(row["eval_loss"] / math.log(2), rel=1e-4)
    half = tmp_path / "half"
    short = RunConfig.from_dict({**config.to_dict(), "train": {**config.to_dict()["train"], "steps": 6}})
    train(short, half, time_limit_s=0.0)  # stops after the first step, checkpoint written
    resumed = train(short, half)
    assert science(resumed.history) == science(whole.history)


def test_generate_cli_continues_a_prompt_with_the_runs_tokenizer(tmp_path, capsys):
    from psattn.cli import main

    train(text_run(tmp_path, steps=3), tmp_path / "run")
    args = ["generate", "--run", str(tmp_path / "run"), "--prompt", "Document 1", "--max-new-tokens", "12", "--seed", "3"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert first.startswith("Document 1") and len(first.encode()) >= len("Document 1") + 1
    assert main(args) == 0 and capsys.readouterr().out == first  # seeded: the same text again
    assert main(args[:-2] + ["--temperature", "0"]) == 0
    capsys.readouterr()
    assert main(args[:-2] + ["--samples", "2", "--top-p", "0.9"]) == 0  # seeds 0 and 1
    two = capsys.readouterr().out
    assert "--- sample 1 of 2 (seed 0) ---" in two and "--- sample 2 of 2 (seed 1) ---" in two
    assert main(args[:-2] + ["--top-p", "0.9", "--seed", "1"]) == 0
    assert two.rstrip().endswith(capsys.readouterr().out.rstrip())  # sample 2 is seed 1's continuation
    with pytest.raises(SystemExit):
        main(["generate", str(tmp_path / "run"), "--prompt", "x"])  # the run directory without its flag
    err = capsys.readouterr().err  # the command's own help, not the top-level one
    assert err.startswith("psattn generate: error:") and "--run-dir" in err and "(see psattn generate -h)" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--run", str(tmp_path / "missing"), "--prompt", "x"])
    assert exit_info.value.code == 2
    synthetic = tmp_path / "synthetic"
    train(tiny_config(2), synthetic)
    with pytest.raises(SystemExit):
        main(["generate", "--run", str(synthetic), "--prompt", "x"])
    assert "only runs of the text task" in capsys.readouterr().err


def test_a_saved_tokenizer_json_is_a_tokenizer_choice(tmp_path):
    corpus = str(numbered_corpus(tmp_path / "corpus"))
    bpe = make_task_config("text", corpus=corpus, tokenizer="bpe", vocab_size=300, seq_len=16).tokens()
    path = tmp_path / "tokenizer.json"
    path.write_text(bpe.tokenizer.to_json())
    reused = make_task_config("text", corpus=corpus, tokenizer=str(path), vocab_size=300, seq_len=16).tokens()
    assert np.array_equal(np.asarray(reused.train), np.asarray(bpe.train))
    assert np.array_equal(np.asarray(reused.eval), np.asarray(bpe.eval))
    assert reused.tokenizer.encode(TEXT) == bpe.tokenizer.encode(TEXT)


def _row(layers, variant, gamma, passage, icl, random=(9.0, 8.9)):
    return {"layers": layers, "variant": variant, "gamma": gamma, "vocab_size": 2048, "icl_score": (icl, None),
            "passage_first_loss": (3.8, None), "passage_second_loss": (3.8 - passage, None),
            "random_first_loss": (random[0], None), "random_second_loss": (random[1], None)}


def test_the_text_verdict_reads_each_clause_off_the_numbers():
    from psattn.experiments.text_report import verdict

    rows = [_row(1, "baseline", 0.0, 0.12, -0.07), _row(1, "key_only", 1.0, 0.36, -0.17),
            _row(2, "baseline", 0.0, 0.13, -0.16)]
    text = verdict(rows)
    assert "largest first: 1 layer, key_only γ=1 0.36, 2 layers, baseline 0.13, 1 layer, baseline 0.12." in text
    assert "one PSA layer copies, and learns in context, more than one plain layer" in text
    assert "they copy less than the single PSA layer" in text
    assert "above the uniform guess's ln V" in text  # 9.0 > ln 2048 = 7.62
    assert "Random tokens (drawn uniformly from the ids the training text uses)" in text  # not the whole vocabulary
    rows[1] = _row(1, "key_only", 1.0, 0.10, -0.17, random=(7.0, 6.0))
    rows[0] = _row(1, "baseline", 0.0, 0.12, -0.07, random=(7.0, 6.9))
    rows[2] = _row(2, "baseline", 0.0, 0.50, -0.30, random=(7.0, 6.0))
    text = verdict(rows)
    assert "first clause does not hold at this budget" in text and "they copy more than the single PSA layer" in text
    assert "ln V" not in text and "speaks for" not in text
    assert verdict(rows, tokens=1_638_400).startswith("This verdict speaks for 1.6M training tokens, before two plain")


def _precision(bpb, top1=None, kl=None):
    m = {"size_bytes": 1e6, "ms_per_token": 0.1, "text": {"bits_per_byte": bpb, "icl_score": -0.2}}
    if top1 is not None:
        m.update(teacher_forced={"top1_agreement": top1, "kl_nats": kl}, greedy={"tokens_agree": 1.0})
    return m


def test_the_edge_verdict_compares_each_int8_mode_on_both_teacher_forced_measures():
    from psattn.experiments.text_report import edge_table, edge_verdict

    edge = {"1 layer, key_only γ=1": {"parameters": 10, "fp32": _precision(2.000),
                                      "INT8 dynamic": _precision(2.001, 0.979, 4.0e-4),
                                      "INT8 static": _precision(2.008, 0.990, 1.0e-4)},
            "2 layers, baseline": {"parameters": 20, "fp32": _precision(1.900),
                                   "INT8 dynamic": _precision(1.901, 0.978, 4.2e-4),
                                   "INT8 static": _precision(1.902, 0.980, 0.9e-4)}}
    text = edge_verdict(edge)
    assert "INT8 dynamic: 1 layer, key_only γ=1 at least as faithful to fp32 as 2 layers, baseline" in text
    assert "+0.0010 from fp32 (within 0.005)" in text
    # better top-1 but worse KL is not "at least as faithful"; 0.008 bits per byte is outside the margin
    assert "INT8 static: 1 layer, key_only γ=1 less faithful to fp32 than 2 layers, baseline" in text
    assert "+0.0080 from fp32 (outside 0.005)" in text
    lines = edge_table(edge)
    assert len(lines) == 2 + 6 and lines[3].startswith("|  |  | INT8 dynamic | ")
    assert "ExecuTorch" not in text  # rows without ExecuTorch entries get no ExecuTorch clause


def test_the_edge_verdict_judges_the_bits_per_byte_shift_it_prints():
    from psattn.experiments.text_report import edge_verdict

    edge = {"1 layer, key_only γ=1": {"fp32": _precision(1.6), "INT8 dynamic": _precision(1.60504, 0.99, 1e-3)},
            "2 layers, baseline": {"fp32": _precision(1.5), "INT8 dynamic": _precision(1.5, 0.99, 1e-3)}}
    assert "+0.0050 from fp32 (within 0.005)" in edge_verdict(edge)  # it read "+0.0050 from fp32 (outside 0.005)"


def test_the_device_table_takes_executorch_rows_and_judges_their_int8_program():
    from psattn.experiments.text_report import edge_table, edge_verdict

    edge = {label: {"parameters": 10, "fp32": _precision(bpb), "INT8 dynamic": _precision(bpb, 0.97, 4e-4),
                    "INT8 static": _precision(bpb, 0.96, 1e-3), "ExecuTorch fp32": _precision(bpb),
                    "ExecuTorch int8": _precision(bpb + 0.001, top1, 1.4e-4)}
            for label, bpb, top1 in (("1 layer, key_only γ=1", 2.0, 0.988), ("2 layers, baseline", 1.9, 0.985))}
    lines = edge_table(edge)
    assert "| precision | on disk |" in lines[0]  # both graphs and the weights file they read
    assert len(lines) == 2 + 10 and [line.split(" | ")[2] for line in lines[2:7]] == [
        "fp32", "INT8 dynamic", "INT8 static", "ExecuTorch fp32", "ExecuTorch int8"]
    text = edge_verdict(edge)
    assert text.count("at least as faithful") == 3
    assert "ExecuTorch int8: 1 layer, key_only γ=1 at least as faithful to fp32 as 2 layers, baseline (top-1 0.9880" in text


def test_reproduce_with_executorch_rows_needs_the_extra_and_says_so_before_training(tmp_path, monkeypatch, capsys):
    import sys

    from psattn.cli import main

    monkeypatch.setitem(sys.modules, "executorch", None)  # as if not installed
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "--quick", "--executorch", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "pip install 'phase-space-attention[executorch]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is made


def test_reproduce_refuses_unknown_sections_before_making_its_folder(tmp_path):
    from psattn.experiments.reproduce import reproduce

    with pytest.raises(ValueError, match="unknown report sections"):
        reproduce(tmp_path / "out", "quick", sections=("inductoin",))
    assert not (tmp_path / "out").exists()


def test_the_text_section_without_the_export_extra_says_how_a_wheel_user_installs_it():
    from psattn.experiments.studies.text import TEXT_PLANS
    from psattn.experiments.text_report import TextResults, text_markdown

    res = TextResults(plan=TEXT_PLANS["quick"], rows=[], histories={}, params={}, edge=None,
                      samples={"1 layer, key_only γ=1": {"prompt": "def f(", "continuation": "x):"}})
    text = "\n".join(text_markdown(res))
    assert "(Not measured: install the export extra, `pip install 'phase-space-attention[export]'`, for the ONNX " \
           "comparison.)" in text


@pytest.mark.parametrize("context, late, early", [(256, "224–255", "16–31"), (100, "88–99", "7–12")])
def test_the_text_section_states_the_icl_windows_the_score_averages(context, late, early):
    """The report named T // 16 .. T // 8 - 1 as the early window; the score averages ceil(T / 16) .. (icl_window)."""
    from psattn.experiments.studies.text import TEXT_PLANS
    from psattn.experiments.text_report import TextResults, text_markdown

    res = TextResults(plan=dataclasses.replace(TEXT_PLANS["quick"], seq_len=context), rows=[], histories={}, params={},
                      edge=None, samples={"1 layer, key_only γ=1": {"prompt": "def f(", "continuation": "x):"}})
    early_range, late_range = icl_window(context)
    assert (early_range[0], early_range[-1]) == tuple(map(int, early.split("–")))
    assert f"loss at positions {late} minus positions {early} " in "\n".join(text_markdown(res))


def test_text_seeds_adds_seeds_to_the_quick_plan_and_shares_its_seed_0_runs():
    from psattn.experiments.studies.text import format_text_summary, text_experiment, text_seeds

    quick, seeds = text_experiment("quick"), text_seeds("quick")
    assert sorted({c.train.seed for c in seeds}) == [0, 1, 2] and len(seeds) == 3 * len(quick)
    assert [c.to_dict() for c in seeds if c.train.seed == 0] == [c.to_dict() for c in quick]
    with pytest.raises(ValueError, match="unknown mode"):
        text_seeds("huge")
    row = {**_row(1, "key_only", 1.0, 0.3, -0.12), "seeds": 3, "bits_per_byte": (1.74, 0.01),
           "icl_score": (-0.12, 0.02), "passage_copy_gain": (0.3, 0.05), "best_prefix_matching_score": (0.02, None)}
    assert format_text_summary([row]) == [
        "1 layer key_only γ=1 (3 seeds): bits/byte 1.740 ± 0.010, ICL score -0.120 ± 0.020, "
        "passage copy gain 0.30 ± 0.05, best prefix-matching score 0.020"]


def test_bpe_without_the_tokenizers_library_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    from psattn.cli import main

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    corpus = str(numbered_corpus(tmp_path / "corpus"))
    with pytest.raises(ImportError, match=r"pip install 'phase-space-attention\[text\]'"):
        make_task_config("text", corpus=corpus, tokenizer="bpe", vocab_size=300, seq_len=16).tokens()
    with pytest.raises(SystemExit) as info:
        main(["train", "--run-dir", str(tmp_path / "run"), "--set", "task.name=text", f"task.corpus={corpus}",
              "task.tokenizer=bpe", "task.vocab_size=300", "model.vocab_size=300", "train.steps=1"])
    assert info.value.code == 2 and "needs Hugging Face tokenizers" in capsys.readouterr().err


def test_generation_past_the_trained_context_slides_its_window():
    """Greedy tokens past the window: each is the model's prediction from the last context - 1 tokens."""
    from psattn.models import DecoderLM, ModelConfig
    from psattn.models.generate import continue_ids

    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_heads=2, init=0.5)).eval()
    prompt, context = [1, 2, 3, 4, 5, 6], 8
    ids = prompt + continue_ids(model, prompt, 20, context=context)
    assert len(ids) == 26
    with torch.no_grad():
        for t in range(6, 26):
            window = ids[t - (context - 1) : t] if t >= context else ids[:t]
            assert ids[t] == int(model(torch.tensor([window]))[0, -1].argmax()), t
    assert continue_ids(model, prompt, 2, context=context) == ids[6:8]
    assert continue_ids(model, [9] * 30 + prompt, 3, context=context) == continue_ids(model, [9] + prompt, 3, context=context)


def test_report_samples_stay_within_the_trained_context(tmp_path, monkeypatch):
    """The report's samples run the model on at most ``task.seq_len`` positions, however long they are."""
    import importlib

    from psattn.experiments import text_report

    generation = importlib.import_module("psattn.models.generate")  # the module: the package exports the function

    config = text_run(tmp_path, steps=3)
    corpus = str(numbered_corpus(tmp_path / "long", paragraphs=200))  # held out: several paragraphs per document
    config = dataclasses.replace(config, name="run", task=dataclasses.replace(config.task, corpus=corpus))
    train(config, tmp_path / "runs" / "run")
    lengths = []
    real = generation.generate

    def spy(model, input_ids, *args, **kwargs):
        out = real(model, input_ids, *args, **kwargs)
        lengths.append(out.sequences.shape[1])
        return out

    monkeypatch.setattr(generation, "generate", spy)
    sample = next(iter(text_report.samples(tmp_path / "runs", [config], max_new_tokens=40).values()))
    assert len(sample["continuation"].encode()) >= 40 - 3  # bytes: a few may be partial characters
    assert max(lengths) == config.task.seq_len


def test_generation_chooses_only_ids_the_tokenizer_can_decode():
    """A byte-level model with more outputs than the 256 bytes writes bytes, at any temperature."""
    from psattn.models import DecoderLM, ModelConfig
    from psattn.models.generate import continue_text

    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=512, d_model=32, n_heads=2, init=0.5)).eval()
    text = continue_text(model, ByteTokenizer(), "Hello", 40, temperature=2.0, seed=0)  # half its ids are no byte
    assert isinstance(text, str) and text


def test_a_bpe_smaller_than_asked_is_said_before_training(tmp_path, caplog):
    config = text_run(tmp_path, steps=1)
    small = dataclasses.replace(config, model=dataclasses.replace(config.model, vocab_size=2000),
                                task=dataclasses.replace(config.task, tokenizer="bpe", vocab_size=2000, seq_len=8))
    size = small.task.tokens().tokenizer.vocab_size
    assert size < 2000
    with caplog.at_level("WARNING"):
        train(small, tmp_path / "run")
    assert f"the BPE tokenizer learned {size:,} ids from this corpus, fewer than task.vocab_size=2000" in caplog.text
    assert f"set task.vocab_size={size}" in caplog.text


def test_the_lm_metrics_refuse_inputs_that_would_give_a_wrong_number():
    """bits_per_byte summed losses and bytes of different tokens; icl_score read a (B, T) loss as B positions
    (2 rows: early and late the same position, a score of 0); head_scores of 0 rows was NaN."""
    from psattn import DecoderLM
    from psattn.models.heads import head_scores

    with pytest.raises(ValueError, match=r"losses \(3,\) and targets \(4,\) must have one shape"):
        bits_per_byte(torch.ones(3), torch.zeros(4, dtype=torch.long), np.ones(16))
    with pytest.raises(ValueError, match=r"position_loss must be the mean loss at each position \(T,\)"):
        icl_score(torch.ones(2, 600))
    with pytest.raises(ValueError, match="at least 3 positions, got 2"):
        icl_window(2)
    model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="batch must be an integer >= 1, got 0"):
        head_scores(model, batch=0, half=4)
    for vocab_size in (1, 17):  # random_'s "from=1 >= to=1"; the embedding's IndexError
        with pytest.raises(ValueError, match=r"vocab_size must be an integer in \[2, 16\]"):
            head_scores(model, batch=2, half=4, vocab_size=vocab_size)


def test_repeat_scores_and_head_scores_name_a_bad_half_offset_or_rows():
    """A negative offset indexed from the end of the row and returned scores; a float half, a negative one
    and 1-D rows raised torch's indexing, randint or shape errors."""
    from psattn import DecoderLM
    from psattn.models.heads import head_scores

    model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_heads=2))
    rows = torch.randint(0, 16, (2, 10), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="offset must be an integer >= 0, got -2"):
        repeat_scores(model, rows, 4, offset=-2)
    with pytest.raises(TypeError, match="half must be an integer >= 2, got 4.0"):  # type mistakes: TypeErrors (were ValueErrors)
        repeat_scores(model, rows, 4.0)
    with pytest.raises(ValueError, match=r"rows must be a \(B, T\) tensor of token ids, got \(10,\)"):
        repeat_scores(model, rows[0], 4)
    with pytest.raises(TypeError, match=r"rows must be a \(B, T\) tensor of token ids, got list"):
        repeat_scores(model, rows.tolist(), 4)
    for half, error in ((-3, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match=f"half must be an integer >= 2, got {half}"):
            head_scores(model, batch=2, half=half)
    for bad in (2.0, None):
        with pytest.raises(TypeError, match=f"batch must be an integer >= 1, got {bad}"):
            head_scores(model, batch=bad, half=4)
        with pytest.raises(TypeError, match=r"vocab_size must be an integer in \[2, 16\]"):
            head_scores(model, batch=2, half=4, vocab_size=bad or "8")
