"""Exports land whole or not at all: an earlier export survives a failed or interrupted one intact, a
new one replaces it whole (no stale file of it survives), and a target that cannot be an export's is
refused before anything is written."""

import errno
import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import tiny_config
from psattn.cli import main
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.trainer import train


def contents(folder) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) with its SHA-256: what must not change."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".staging-" in p.name or ".old-" in p.name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A key-only run (γ 1) and a baseline run, trained once for the module."""
    folder = tmp_path_factory.mktemp("export-runs")
    train(tiny_config(2), folder / "key_only")
    train(apply_overrides(tiny_config(2), ["model.attention.variant=baseline", "model.attention.gamma=0"]),
          folder / "baseline")
    return folder


@pytest.fixture(scope="module")
def key_only_pair(runs, tmp_path_factory):
    """The key-only run's graphs and weights as ``psattn export`` writes them to m.onnx: the earlier export
    that the interrupted exports below must leave as it was (each test copies it beside its own target)."""
    from psattn.export.onnx import export_onnx
    from psattn.training.run_dir import load_trained

    folder = tmp_path_factory.mktemp("key-only-pair")
    export_onnx(load_trained(runs / "key_only"), folder / "m.onnx")
    return folder


def copied(pair, folder):
    for path in pair.iterdir():
        shutil.copy(path, folder)


def _one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # transformers may draw a progress bar before it
    assert stop.value.code == 2 and "Traceback" not in err and last.startswith("psattn: error: "), err
    return last


# --- refusals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, name", [("onnx", "m.onnx"), ("executorch", "m.pte"), ("hf", "m")])
def test_a_refused_run_leaves_no_folder_of_its_export(runs, tmp_path, capsys, fmt, name):
    """A path that is not a run directory, and a run whose config.json was edited after training, are
    refused in one line, and the folders the export's path named are not left behind."""
    edited = shutil.copytree(runs / "key_only", tmp_path / "edited")
    config = json.loads((edited / "config.json").read_text())
    config["model"]["attention"]["gamma"] = 0.5
    (edited / "config.json").write_text(json.dumps(config))
    for run, says in ((tmp_path / "nonexist", "not a run directory"), (edited, "model.attention.gamma = 1.0")):
        err = _one_line_error(["export", "--format", fmt, "--run-dir", str(run),
                               "--out", str(tmp_path / "w" / "o7" / name)], capsys)
        assert says in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["edited"], fmt


@pytest.mark.parametrize("fmt, name", [("onnx", "m.onnx"), ("hf", "m")])
def test_a_folder_that_refuses_new_entries_is_named_not_the_hidden_staging_folder(runs, tmp_path, capsys, monkeypatch, fmt,
                                                                                  name):
    """Where the target's folder takes no new file (a read-only or virtual file system), the line named
    ``.m.onnx.staging-<pid>-<random>``, a folder the user never gave; so did ``eval --json``'s temporary file."""
    import tempfile

    def refused(*args, dir=None, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted", str(Path(dir) / ".hidden-name"))

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    target = tmp_path / name
    err = _one_line_error(["export", "--format", fmt, "--run-dir", str(runs / "key_only"), "--out", str(target)], capsys)
    assert err == f"psattn: error: cannot write {target}: {tmp_path} refused a new entry (Operation not permitted)"
    err = _one_line_error(["eval", "--run-dir", str(runs / "key_only"), "--json", str(tmp_path / "x.json")], capsys)
    assert err == f"psattn: error: cannot write {tmp_path / 'x.json'}: {tmp_path} refused a new entry (Operation not permitted)"


def test_a_failed_export_into_new_folders_leaves_none_of_them(tmp_path):
    """A full disk while writing an export whose path named folders that did not exist: they go with it."""
    from psattn.export.staging import ExportFailed, staged_files, staged_folder

    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(ExportFailed, match="Is the disk full"), \
            staged_files(tmp_path / "a" / "b" / "m.onnx", lambda path: [path]) as graph:
        graph.write_bytes(b"half a graph")
        raise full
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExportFailed, match="Is the disk full"), staged_folder(tmp_path / "a" / "b" / "m") as folder:
        (folder / "config.json").write_text("{}")
        raise full
    assert list(tmp_path.iterdir()) == []


# --- Hugging Face folders -------------------------------------------------------------------------------

def test_a_model_whose_logits_are_not_finite_is_refused_before_any_comparison_and_nothing_lands(runs, tmp_path,
                                                                                                  capsys, monkeypatch):
    """A model gone NaN would export (the graphs are fine), but there is nothing to compare: the export is refused
    in one line, before the graphs are exported (it was after), and neither graph lands beside --out."""
    pytest.importorskip("onnxruntime")
    import torch

    from psattn.export import compare

    def poisoned(run_dir):
        model = load(run_dir)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        return model

    load, export, exported = compare.load_trained, compare.write_onnx_files, []
    monkeypatch.setattr(compare, "load_trained", poisoned)
    monkeypatch.setattr(compare, "write_onnx_files", lambda *args: exported.append(args) or export(*args))
    err = _one_line_error(["export", "--run-dir", str(runs / "key_only"), "--out", str(tmp_path / "m.onnx")], capsys)
    assert "PyTorch gives NaN or infinite logits" in err and "nothing meaningful to compare" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [] and exported == []


def test_hf_export_to_an_existing_file_is_refused_and_the_file_kept(runs, tmp_path, capsys):
    pytest.importorskip("transformers")
    (tmp_path / "model").write_text("mine")
    err = _one_line_error(["export", "--format", "hf", "--run-dir", str(runs / "key_only"),
                           "--out", str(tmp_path / "model")], capsys)
    assert "is a file" in err, err
    assert (tmp_path / "model").read_text() == "mine" and leftovers(tmp_path) == []


def test_a_failed_hf_export_leaves_the_earlier_one_whole(runs, tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    from psattn.integrations.hf import decoder_model

    out = tmp_path / "hf"
    assert main(["export", "--format", "hf", "--run-dir", str(runs / "key_only"), "--out", str(out)]) == 0
    before = contents(out)
    save = decoder_model.PsattnForCausalLM.save_pretrained

    def disk_fills(self, folder, **kwargs):  # config.json written, then the weights do not fit
        save(self, folder, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.safetensors"))

    monkeypatch.setattr(decoder_model.PsattnForCausalLM, "save_pretrained", disk_fills)
    err = _one_line_error(["export", "--format", "hf", "--run-dir", str(runs / "baseline"), "--out", str(out)], capsys)
    assert "Is the disk full?" in err and str(out) in err, err
    assert contents(out) == before and leftovers(tmp_path) == []
    assert json.loads((out / "config.json").read_text())["psattn_model"]["attention"]["variant"] == "key_only"


def test_an_hf_export_replaces_an_earlier_one_whole(runs, tmp_path, capsys, fresh_token_cache):
    """A text run's export (with its tokenizer) replaced by an induction run's: no tokenizer survives."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    (tmp_path / "corpus.txt").write_text("def f(x):\n    return x + 1\n\n" * 120)
    text = RunConfig.from_dict({"task": {"name": "text", "corpus": str(tmp_path / "corpus.txt"), "seq_len": 16},
                                "model": {"vocab_size": 256}})
    train(apply_overrides(text, ["model.d_model=32", "model.n_heads=2", "train.steps=2", "train.batch_size=2",
                                 "train.eval_every=2", "train.eval_size=4", "train.threads=1"]), tmp_path / "text")
    out = tmp_path / "hf"
    assert main(["export", "--format", "hf", "--run-dir", str(tmp_path / "text"), "--out", str(out)]) == 0
    assert (out / "tokenizer.json").exists()
    assert main(["export", "--format", "hf", "--run-dir", str(runs / "key_only"), "--out", str(out)]) == 0
    assert not (out / "tokenizer.json").exists() and not (out / "tokenizer_config.json").exists()
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 16 and leftovers(tmp_path) == []


def test_a_folder_holding_other_files_is_replaced_only_with_force(runs, tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = _one_line_error(["export", "--format", "hf", "--run-dir", str(runs / "key_only"), "--out", str(out)], capsys)
    assert "notes.txt" in err and "--force" in err, err
    assert contents(out) == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}
    assert main(["export", "--format", "hf", "--run-dir", str(runs / "key_only"), "--out", str(out), "--force"]) == 0
    assert not (out / "notes.txt").exists() and (out / "config.json").exists()


def test_a_folder_holding_the_run_or_the_working_directory_is_never_replaced(runs, tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    before = contents(runs)
    monkeypatch.chdir(tmp_path)
    for out in (runs, runs / "key_only", tmp_path, "."):
        err = _one_line_error(["export", "--format", "hf", "--run-dir", str(runs / "key_only"), "--out", str(out),
                               "--force"], capsys)
        assert "replaces its folder as a whole: name a folder of its own" in err, err
    assert contents(runs) == before


# --- ONNX pairs -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_interrupted_onnx_export_leaves_the_earlier_pair_and_says_interrupted(runs, key_only_pair, tmp_path, capsys,
                                                                                 monkeypatch):
    """Ctrl-C after the prefill graph is written, and Ctrl-C that the exporter wraps in its own error:
    the earlier pair stays as it was, and the command says "interrupted" (exit code 130)."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    from psattn.export import onnx as onnx_export

    out = tmp_path / "m.onnx"
    copied(key_only_pair, tmp_path)
    before = contents(tmp_path)
    export = onnx_export._export
    calls = []

    def interrupted_at_decode(graph, args, path, dynamic_shapes):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        export(graph, args, path, dynamic_shapes)

    def wrapped_by_the_exporter(graph, args, path, dynamic_shapes):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise RuntimeError("Failed to export the model with torch.export") from err

    for fake in (interrupted_at_decode, wrapped_by_the_exporter):
        monkeypatch.setattr(onnx_export, "_export", fake)
        assert main(["export", "--run-dir", str(runs / "baseline"), "--out", str(out)]) == 130
        err = capsys.readouterr().err
        assert "interrupted" in err and "Error" not in err, err
        assert contents(tmp_path) == before and leftovers(tmp_path) == []


def test_an_onnx_export_removes_the_int8_files_of_an_earlier_one(runs, tmp_path, capsys):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    (tmp_path / "m.int8-dynamic.onnx").write_text("an earlier export's INT8 graph")
    (tmp_path / "m.int8-dynamic.decode.onnx").write_text("and its decode step")
    (tmp_path / "other.onnx").write_text("not of this export")
    assert main(["export", "--run-dir", str(runs / "baseline"), "--out", str(tmp_path / "m.onnx"), "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert files == {"prefill": str(tmp_path / "m.onnx"), "decode": str(tmp_path / "m.decode.onnx"),
                     "data": str(tmp_path / "m.onnx.data")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.decode.onnx", "m.onnx", "m.onnx.data", "other.onnx"]


def test_an_executorch_program_and_its_weights_file_land_together(runs, tmp_path, monkeypatch):
    """With external weights the export writes m.pte and m.ptd: a Ctrl-C once both are written (during the
    comparison) leaves the earlier one-file program as it was, and no .ptd beside it; a one-file export
    removes the .ptd of an earlier external one, which the program beside it would not read."""
    from psattn.export import compare_executorch
    from psattn.export.executorch import data_path_for

    def compared(model, run_dir, path, quantize, rows, decode_tokens, external_weights):
        path.write_bytes(b"a new program")
        if external_weights:
            data_path_for(path).write_bytes(b"its weights")
        if stop:
            raise KeyboardInterrupt
        return {"files": {"fp32": str(path)}}

    monkeypatch.setattr(compare_executorch, "_compare", compared)
    out = tmp_path / "m.pte"
    out.write_bytes(b"an earlier program")
    before = contents(tmp_path)
    stop = True
    with pytest.raises(KeyboardInterrupt):
        compare_executorch.executorch_and_compare(runs / "key_only", out, external_weights=True)
    assert contents(tmp_path) == before and leftovers(tmp_path) == []
    stop = False
    compare_executorch.executorch_and_compare(runs / "key_only", out, external_weights=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ptd", "m.pte"]
    compare_executorch.executorch_and_compare(runs / "key_only", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pte"]


@pytest.mark.parametrize("fmt", ["onnx", "executorch"])
def test_a_stop_as_the_export_moves_in_leaves_its_json_summary_beside_it(runs, tmp_path, monkeypatch, fmt):
    """psattn export --json PATH wrote the summary once the export had moved in: a SIGTERM held while it moved ended
    the process on leaving the held block, the new export beside the earlier export's summary. The summary is now
    renamed into place with the export."""
    from helpers import Ended, default_action_raises, stop_on_moving_into
    from psattn.export import compare, compare_executorch

    def compared(model, run_dir, path, *args):
        path.write_bytes(b"a new export")
        return {"files": {"fp32": str(path)}}

    monkeypatch.setattr(compare, "_export_and_compare", compared)
    monkeypatch.setattr(compare_executorch, "_compare", compared)
    out, summary = tmp_path / f"m.{'pte' if fmt == 'executorch' else 'onnx'}", tmp_path / "summary.json"
    summary.write_text('"the earlier export\'s summary"')
    stop_on_moving_into(monkeypatch, tmp_path)
    with default_action_raises(signal.SIGTERM, lambda: json.loads(summary.read_text())) as seen, \
            pytest.raises((Ended, SystemExit)):
        main(["export", "--format", fmt, "--run-dir", str(runs / "key_only"), "--out", str(out), "--json", str(summary)])
    assert seen == [{"files": {"fp32": str(out)}}] and out.read_bytes() == b"a new export"


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in this process while the test runs, as in a terminal (a test runner's
    worker may ignore it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_as_the_export_moves_in_says_that_the_export_is_in_place(runs, tmp_path, monkeypatch, capsys,
                                                                          ctrl_c_raises):
    """A Ctrl-C held while the files moved in ended the command with "interrupted" alone, as if nothing had been
    written, the new export and its summary whole in place: a user would export again for nothing."""
    from helpers import stop_on_moving_into
    from psattn.export import compare

    def compared(model, run_dir, path, *args):
        path.write_bytes(b"a new export")
        return {"files": {"fp32": str(path)}}

    monkeypatch.setattr(compare, "_export_and_compare", compared)
    out, summary = tmp_path / "m.onnx", tmp_path / "summary.json"
    stop_on_moving_into(monkeypatch, tmp_path, signal.SIGINT)
    assert main(["export", "--run-dir", str(runs / "key_only"), "--out", str(out), "--json", str(summary)]) == 130
    assert capsys.readouterr().err.strip() == f"psattn: interrupted after the export was in place ({out} is whole)"
    assert out.read_bytes() == b"a new export" and json.loads(summary.read_text()) == {"files": {"fp32": str(out)}}


def test_a_ctrl_c_as_a_folder_export_moves_in_says_so_and_leaves_no_earlier_copy_beside_it(tmp_path, monkeypatch,
                                                                                           ctrl_c_raises):
    from helpers import stop_on_moving_into
    from psattn.export.staging import staged_folder

    target = tmp_path / "hf"
    with staged_folder(target) as folder:
        (folder / "config.json").write_text("the earlier export")
    stop_on_moving_into(monkeypatch, tmp_path, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match=rf"^after the export was in place \({target} is whole\)$"):
        with staged_folder(target) as folder:
            (folder / "config.json").write_text("the new export")
    assert (target / "config.json").read_text() == "the new export" and leftovers(tmp_path) == []


@pytest.mark.slow
def test_sigint_at_several_moments_of_an_export_leaves_one_whole_pair(runs, key_only_pair, tmp_path):
    """Real Ctrl-C to ``psattn export``, at several moments after it starts writing: exit code 130 and
    "interrupted" (or a finished export), and beside the target either the earlier pair or the new one."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    out = tmp_path / "m.onnx"
    command = [sys.executable, "-m", "psattn", "export", "--out", str(out), "--run-dir"]
    copied(key_only_pair, tmp_path)
    for delay in (0.5, 2.0):
        old = contents(tmp_path)
        process = subprocess.Popen(command + [str(runs / "baseline")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".m.onnx.staging-*")) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the export has started writing
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert "Traceback" not in err and leftovers(tmp_path) == [], err
        now = contents(tmp_path)
        assert sorted(now) == ["m.decode.onnx", "m.onnx", "m.onnx.data"], now
        same = {name: now[name] == old[name] for name in now}
        assert len(set(same.values())) == 1, (delay, same)  # one export: both graphs and the weights they read
        # on a loaded machine the signal may come late, as the finished command exits: once Python has given
        # SIGINT back its default action, it ends the process (rc -2) without a word, the new export in place
        ended_by_it = process.returncode == -signal.SIGINT and not any(same.values())
        assert (process.returncode == 130 and "interrupted" in err) or process.returncode == 0 or ended_by_it, \
            (delay, process.returncode, err)


def test_a_ctrl_c_during_the_swap_waits_for_it_whichever_thread_it_lands_in(tmp_path):
    """The swap held Ctrl-C back from the main thread alone; with another thread running (torch's, a progress
    bar's) the kernel handed the signal to that one, CPython raised in the main thread all the same, and the
    export stopped with half of its files moved. (In a process of its own: signal handlers run in a main thread.)"""
    import subprocess
    import sys

    script = tmp_path / "swap.py"
    target = tmp_path / "m.onnx"
    script.write_text(f"""
import os, signal, threading, time
from pathlib import Path
from psattn.export import staging

replace, sent = os.replace, []
def replace_signalled(src, dst):  # a Ctrl-C comes while the files move into place
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    replace(src, dst)

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test runner's worker may ignore it)
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # a thread that takes signals
staging.os.replace = replace_signalled
target = Path({str(target)!r})
try:
    with staging.staged_files(target, lambda path: [path, path.with_suffix(".data")]) as out:
        out.write_bytes(b"graph")
        out.with_suffix(".data").write_bytes(b"weights")
except KeyboardInterrupt:
    print("interrupted after the swap")
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert "interrupted after the swap" in done.stdout, done.stderr[-2000:]
    assert target.read_bytes() == b"graph" and target.with_suffix(".data").read_bytes() == b"weights"


@pytest.mark.parametrize("kind", ["files", "folder"])
def test_a_ctrl_c_just_as_the_staging_folder_is_made_leaves_no_staging_folder(tmp_path, kind):
    """The staging folder was made before the cleanup that removes it was set up: a Ctrl-C landing in between
    stopped the export and left the hidden folder beside the target. (In a process of its own, as above.)"""
    script = tmp_path / "made.py"
    out = tmp_path / "out"
    script.write_text(f"""
import os, signal
from pathlib import Path
from psattn.export import staging

made = staging._new_folder
def made_then_ctrl_c(target, kind):
    folder = made(target, kind)
    os.kill(os.getpid(), signal.SIGINT)  # handled before this returns the folder
    return folder

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test runner's worker may ignore it)
staging._new_folder = made_then_ctrl_c
target = Path({str(out / "m.onnx")!r})
context = staging.staged_files(target, lambda p: [p]) if {kind!r} == "files" else staging.staged_folder(target)
try:
    with context:
        print("not stopped")
except KeyboardInterrupt:
    print("interrupted")
""")
    out.mkdir()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["interrupted"], done.stderr[-2000:]
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("kind", ["files", "folder"])
def test_sigterm_during_an_export_ends_the_process_and_leaves_no_staging_folder(tmp_path, kind):
    """SIGTERM (timeout's, a scheduler's) ended the process on the spot and left the hidden staging folder,
    half an export, beside the target; now the cleanup runs first and the process still ends by SIGTERM."""
    script = tmp_path / "term.py"
    out = tmp_path / "out"
    script.write_text(f"""
import os, signal
from pathlib import Path
from psattn.export import staging

signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a shell (a test runner's worker may handle it)
target = Path({str(out / "new" / "m.onnx")!r})
context = staging.staged_files(target, lambda p: [p]) if {kind!r} == "files" else staging.staged_folder(target)
with context as staged:
    (staged if {kind!r} == "files" else staged / "model.bin").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause()
print("not ended")
""")
    out.mkdir()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert list(out.iterdir()) == []  # no staging folder, and not the folder made for the target


def test_the_files_an_export_writes_get_the_permissions_of_any_new_file(runs, tmp_path):
    """safetensors writes model.safetensors private (0600): psattn export --format hf left it so, unreadable to
    anyone else sharing the folder, where every other file an export writes is 0644 under the usual umask."""
    from psattn.export.staging import staged_files, staged_folder
    from psattn.files import NEW_FILE_MODE

    with staged_folder(tmp_path / "folder") as folder:
        (folder / "private.bin").write_bytes(b"x")
        (folder / "private.bin").chmod(0o600)
    with staged_files(tmp_path / "m.onnx", lambda path: [path]) as graph:
        graph.write_bytes(b"x")
        graph.chmod(0o600)
    assert [p.stat().st_mode & 0o777 for p in (tmp_path / "folder" / "private.bin", tmp_path / "m.onnx")] == \
        [NEW_FILE_MODE] * 2
    assert main(["export", "--run-dir", str(runs / "key_only"), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "hf").iterdir()}["model.safetensors"] == NEW_FILE_MODE
