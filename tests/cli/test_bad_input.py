"""Every bad command line gets exit code 2 and a readable message, never a traceback."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from helpers import tiny_config
from psattn.cli import main
from psattn.training.config import apply_overrides
from psattn.training.trainer import train


@pytest.fixture(scope="module")
def made_once(tmp_path_factory):
    """The files and runs every case reads, trained once for the module (each case gets a copy)."""
    tmp_path = tmp_path_factory.mktemp("bad-input")
    (tmp_path / "broken.json").write_text('{"model": {')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "numbers.json").write_text("[1, 2, 3]")
    (tmp_path / "sweep.json").write_text("[[16, 0.5], [32, 0.4]]")
    for name, config in {"batch": {"batch": "2"}, "unknown": {"unknown": 1}, "records": {"n_records": 2.5},
                         "seed": {"seed": 2**70},
                         "frequencies": {"kernel": {"name": "rope", "frequencies": 1.0}}}.items():
        (tmp_path / f"mf_{name}.json").write_text(json.dumps(config))
    (tmp_path / "wrongtype.json").write_text(json.dumps({"model": {"d_model": "big"}}))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00junk")
    train(tiny_config(2), tmp_path / "run")  # a finished induction run (no tokenizer)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text((tmp_path / "run" / "config.json").read_text())
    (tmp_path / "corrupt" / "checkpoint.pt").write_bytes(b"junk")
    _copy_run(tmp_path / "run", tmp_path / "nan", lambda state: state["model"]["embed.weight"].__setitem__(0, float("nan")))
    shutil.copytree(tmp_path / "nan", tmp_path / "nan_tokens")  # one generate reads: a tokenizer beside it
    (tmp_path / "nan_tokens" / "tokenizer.json").write_text('{"kind": "byte"}')
    other = tiny_config(2)
    other.model.d_model = 64
    train(other, tmp_path / "other")
    _copy_run(tmp_path / "run", tmp_path / "foreign", lambda state: state.update(
        model=torch.load(tmp_path / "other" / "checkpoint.pt", weights_only=True)["model"]))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    (tmp_path / "cut").mkdir()  # a metrics.jsonl whose last row a kill cut short
    (tmp_path / "cut" / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0, "accuracy": 0.1}\n{"step": 10, "lo')
    (tmp_path / "theory").mkdir()  # a theory report's folder
    (tmp_path / "theory" / "theory.md").write_text("## Theory\n")
    return tmp_path


@pytest.fixture
def files(made_once, tmp_path):
    """A fresh copy of the shared files, so that no case sees what another wrote."""
    return Path(shutil.copytree(made_once, tmp_path / "files"))


def _copy_run(src, dst, change):
    """A copy of run directory ``src`` whose checkpoint state went through ``change``."""
    shutil.copytree(src, dst)
    state = torch.load(dst / "checkpoint.pt", weights_only=True)
    change(state)
    torch.save(state, dst / "checkpoint.pt")


CASES = [
    # train
    ("train --config {d}/missing.json --run-dir {d}/r", "does not exist"),
    ("train --config inducton --run-dir {d}/r", "config file inducton does not exist, nor is it a shipped config's name (induc"),
    ("train --config {d} --run-dir {d}/r", "is a directory; give the path of a JSON file"),
    ("train --run-dir {d}/r --set train.eval_size=1000000000", "GiB of held-out rows"),  # it died allocating them
    ("eval --run-dir {d}/run --rows 100000000", "drawing 100,000,000 held-out rows needs about"),  # 25 GiB kept, 24x drawn
    ("eval --run-dir {d}/run --set task.seq_len=100000", "held-out rows of task.seq_len=100000 does not fit in memory"),
    ("train --config= --run-dir {d}/r", "--config is empty"),
    ("train --run-dir= --set train.steps=1", "argument --run-dir: expected a path, got '' (write . for the current"),
    ("train --config {d}/broken.json --run-dir {d}/r", "not valid JSON"),
    ("train --config {d}/binary.json --run-dir {d}/r", "not valid JSON"),
    ("train --config {d}/list.json --run-dir {d}/r", "JSON object"),
    ("train --config {d}/wrongtype.json --run-dir {d}/r", "d_model"),
    ("train --run-dir {d}/r --set task.num_distractors=1.5", "induction task num_distractors must be an integer, got 1.5"),
    ("train --run-dir {d}/r --set task.name=mqar task.seq_len=40.0", "MQAR task seq_len must be an integer, got 40.0"),
    ("train --run-dir {d}/r --set model.attention.gamma=abc", "gamma must be a real number"),
    ("train --run-dir {d}/r --set model.attention.gamma=nan", "gamma must be finite"),
    ("train --run-dir {d}/r --set model.attention.gamma=inf", "gamma must be finite"),
    ("train --run-dir {d}/r --set model.attention.variant=sideways", "unknown attention variant"),
    ("train --run-dir {d}/r --set model.attention.variant=baseline model.attention.gamma=1", "baseline has no shear"),
    ("train --run-dir {d}/r --set train.steps=-5", "train.steps"),
    ("train --run-dir {d}/r --set train.lr=[1]", "train.lr"),
    ("train --run-dir {d}/r --set nokey", "section.field=value"),
    ("train --run-dir {d}/r --set model.nofield=3", "unknown field"),
    ("train --run-dir {d}/r --set task.name=nothing", "unknown task"),
    ("train --run-dir {d}/r --set task.seq_len=true", "seq_len"),
    ("train --run-dir {d}/r --set task.name=mqar task.power_a=inf", "power_a must be a finite number > 0, got inf"),
    ("train --run-dir {d}/r --set task.name=mqar task.power_a=true", "power_a must be a finite number > 0, got True"),
    ("train --run-dir {d}/r --set task.name=random_offset task.num_keys=1 task.num_values=2 task.num_pairs=1 "
     "task.num_queries=1 task.seq_len=3 train.eval_size=4", "could not draw 4 'eval' rows in 64 rounds"),
    ("train --run-dir {d}/r --time-limit -1", "argument --time-limit: expected a finite number >= 0, got -1"),
    ("train --run-dir {d}/r --time-limit nan", "argument --time-limit: expected a finite number >= 0, got nan"),
    ("train --run-dir {d}/run --set model.d_model=64", "different config"),
    ("train --config {d}/corrupt/config.json --run-dir {d}/corrupt", "not a readable psattn checkpoint"),
    ("train --run-dir {d}/r --steps 3", "unrecognized arguments"),
    ("train --run-dir {d}/broken.json --set train.steps=1", "broken.json is a file, where a folder is needed: name a"),
    ("train --run-dir {d}/r --set train.seed=4294967296", "seed must be below 2**32"),
    ("train --run-dir {d}/r --set model.attention.gamma=1e39", "gamma must lie within"),
    ("train --run-dir {d}/r --set train.lr=1e300", "lr must be a positive number up to 10"),
    ("train --config {d}/nan/config.json --run-dir {d}/nan", "holds non-finite weights"),
    ("train --config {d}/foreign/config.json --run-dir {d}/foreign", "does not hold the weights of the model"),
    # demo, sweep, reproduce
    ("demo --steps 0 --out {d}/demo", "positive integer"),
    ("sweep variants --workers 0 --out {d}/s", "positive integer"),
    ("sweep nothing --out {d}/s", "invalid choice"),
    ("reproduce --workers -1 --out {d}/rep", "positive integer"),
    ("reproduce --quick --full", "not allowed with"),
    ("sweep variants --out {d}/broken.json --time-limit 60", "broken.json is a file, where a folder is needed"),
    ("demo --steps 2 --out {d}/broken.json", "broken.json is a file, where a folder is needed"),
    # export, generate
    ("export --run-dir {d}/missing --out {d}/m.onnx", "not a run directory"),
    ("export --run-dir {d}/run --out {d}/run/checkpoint.pt", "checkpoint.pt, a file of the run itself"),
    ("export --format executorch --run-dir {d}/run --out {d}/run/config.json", "config.json, a file of the run itself"),
    ("export --run-dir {d}/corrupt --out {d}/m.onnx", "not a readable psattn checkpoint"),
    ("generate --run-dir {d}/missing --prompt hi", "no trained run"),
    ("generate --run-dir {d}/run --prompt hi", "no tokenizer.json"),
    ("generate --run-dir {d}/run --prompt hi --seed 99999999999999999999", "a seed must lie in"),
    ("generate --run-dir {d}/run --prompt hi --top-p 1.5", "argument --top-p: expected a number in (0, 1], got 1.5"),
    ("generate --run-dir {d}/run --prompt hi --max-new-tokens 0", "argument --max-new-tokens: expected a positive"),
    ("generate --run-dir {d}/run --prompt hi --temperature 0 --top-k 5", "--top-k and --top-p apply when sampling"),
    ("generate --run-dir {d}/run --prompt hi --temperature 0 --top-p 0.9", "--temperature 0 decodes greedily"),
    ("generate --run-dir {d}/run --prompt hi --temperature 0 --samples 2", "the same text for every seed"),
    *([("eval --run-dir {d}/run --device cuda", "--device='cuda:0' but CUDA is not available; use --device cpu or auto")]
      if not torch.cuda.is_available() else []),  # it named train.device, which the user never gave
    ("footprint {d}/run --context 0", "argument --context: expected a positive integer, got 0"),
    ("frob", "invalid choice: 'frob'"),
    ("-q -v configs", "-q/--quiet and -v/--verbose cannot be combined"),
    ("export --run-dir {d}/nan --out {d}/nan.onnx", "holds non-finite weights"),
    ("generate --run-dir {d}/nan_tokens --prompt hi", "holds non-finite weights"),
    ("export --run-dir {d}/foreign --out {d}/f.onnx", "does not hold the weights of the model"),
    ("export --run-dir {d}/run --out {d}/m.onnx --quantize int8", "--quantize applies to --format executorch"),
    ("export --format executorch --run-dir {d}/run --out {d}/m.pte --int8", "--int8 applies to --format onnx"),
    ("export --run-dir {d}/run --out {d}/m.onnx --external-weights", "--external-weights applies to --format executorch"),
    ("export --format hf --run-dir {d}/run --out {d}/hf --external-weights", "--external-weights applies to --format"),
    ("plot {d}/empty --out {d}/p.png", "holds no metrics rows"),
    ("plot {d}/cut --out {d}/p.png", "cut/metrics.jsonl line 2 is not valid JSON"),
    ("eval --run-dir {d}/run --json {d}/run", "is a folder; name the JSON file to write"),
    ("eval --run-dir {d}/run --json=", "argument --json: expected a file to write the JSON to, or '-'"),
    ("eval --run-dir {d}/run --json {d}/broken.json/scores.json", "broken.json is a file, not a folder; name a JSON"),
    # theory
    ("theory fit-exponent {d}/missing.json", "does not exist"),
    ("theory fit-exponent {d}/broken.json", "not valid JSON"),
    ("theory fit-exponent {d}/numbers.json", "is neither a (d_k, gamma_critical) pair nor a record"),
    ("theory fit-exponent {d}/sweep.json --json {d}/sweep.json", "would replace the sweep results it fits"),
    ("theory gamma-c --d-k 0 --context 10", "d_k"),
    ("theory gamma-c --d-k 16 --context 0", "context length"),
    ("theory gamma-c --d-k 16 --context 10 --c nan", "c must be"),
    ("theory bode --gamma nan --out {d}/b", "gamma must be finite"),
    ("theory bode --gamma 0.3 --out {d}/broken.json", "broken.json is a file, where a folder is needed"),
    ("theory bode --gamma 0.3 --out {d}/theory", "holds a theory report (theory.md), whose bode.png and"),
    ("theory phase-diagram --out {d}/theory", "holds a theory report (theory.md), whose phase_diagram.png this"),
    # mean field
    ("meanfield run --n 0 --out {d}/m", "number of particles"),
    ("meanfield run --seed 99999999999999999999 --out {d}/m", "argument --seed: a seed must lie in [0, 2**32"),
    ("meanfield run --kernel prefix --gauge-seed -1 --out {d}/m", "argument --gauge-seed: a seed must lie in"),
    ("meanfield run --config {d}/mf_seed.json --out {d}/m", "seed must be a seed in [0, 2**32 = 4294967296), got 1180"),
    ("meanfield run --n -5 --out {d}/m", "number of particles"),
    ("meanfield run --beta nan --out {d}/m", "beta"),
    ("meanfield run --config {d}/missing.json --out {d}/m", "does not exist"),
    ("meanfield run --config {d}/list.json --out {d}/m", "JSON object"),
    ("meanfield run --out {d}/run", "holds a training run"),  # it replaced the run's config.json
    ("meanfield run --n 4 --tau 0.1 --out {d}/broken.json", "broken.json is a file, where a folder is needed"),
    ("meanfield run --kernel cosine_toeplitz --omega nan --out {d}/m", "kernel omega must be finite"),
    ("meanfield run --dt 1e-320 --out {d}/m", "takes inf steps"),  # OverflowError
    ("meanfield run --n 10000000 --out {d}/m", "does not fit in memory"),  # the allocator's RuntimeError
    ("meanfield run --batch 100000000000 --out {d}/m", "does not fit in memory"),
    ("meanfield run --d 100000000 --out {d}/m", "does not fit in memory"),
    ("meanfield run --config {d}/mf_batch.json --out {d}/m", "batch must be an integer, got '2'"),  # TypeError
    ("meanfield run --config {d}/mf_unknown.json --out {d}/m", "mf_unknown.json: unknown field 'unknown'"),
    ("meanfield run --config {d}/mf_records.json --out {d}/m", "n_records must be an integer, got 2.5"),
    ("meanfield run --config {d}/mf_frequencies.json --out {d}/m", "kernel frequencies must be a list of numbers"),
    # certificates, Hugging Face demo
    ("certify --only nothing", "nothing"),
    ("certify --only", "argument --only: expected at least one argument"),  # it ran every certificate
    ("certify --operator nothing", "nothing"),
    ("hf-demo --new-tokens 0", "--new-tokens"),
    ("hf-demo --seed 99999999999999999999", "argument --seed: a seed must lie in [0, 2**32"),
    ("hf-demo --arch gpt2", "invalid choice"),
]


@pytest.mark.parametrize("command,message", CASES, ids=[c for c, _ in CASES])
def test_bad_input_exits_2_with_one_readable_line(files, command, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(command.format(d=files).split())
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert len(err.splitlines()) == 1, err  # the line alone: no usage, no traceback
    assert err.startswith("psattn") and "error:" in err and message in err, err


def test_verbose_adds_the_traceback_to_the_one_line(files, caplog, capsys):
    """-v logs the error's traceback before the same one line and exit code 2; without it no traceback."""
    command = f"theory fit-exponent {files}/broken.json".split()
    for flags, traceback in (([], False), (["-v"], True)):
        caplog.clear()
        with pytest.raises(SystemExit) as stop:
            main([*command, *flags])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith("psattn: error:") and "not valid JSON" in err, err
        assert ("Traceback" in caplog.text and "in read_json" in caplog.text) == traceback, caplog.text


def test_a_failed_start_leaves_the_directory_free_for_the_corrected_command(tmp_path, capsys):
    """A misspelt corpus fails before anything is written; a folder holding only the config of a failed
    start (as an older psattn left) is not protected either."""
    run = tmp_path / "run"
    base = f"train --run-dir {run} --set task.name=text model.d_model=32 model.n_heads=2 train.steps=2 train.eval_size=4"
    with pytest.raises(SystemExit):
        main((base + " task.corpus=austin").split())
    assert "is neither a named corpus" in capsys.readouterr().err
    assert not (run / "config.json").exists()
    train(tiny_config(2), tmp_path / "old")
    (tmp_path / "old" / "checkpoint.pt").unlink()
    (tmp_path / "old" / "metrics.jsonl").write_text("")
    (tmp_path / "old" / "result.json").unlink()
    assert train(tiny_config(3), tmp_path / "old").steps == 3  # another config, but nothing trained was there


def test_an_out_of_memory_model_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(f"train --run-dir {tmp_path / 'r'} --set model.vocab_size=4000000000 model.d_model=1024".split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and "does not fit in memory" in err, err
    assert not (tmp_path / "r").exists()  # no run folder, lock or partial file


@pytest.mark.parametrize("where", ["step", "evaluation"])
def test_a_run_out_of_memory_at_its_first_step_leaves_no_trace(tmp_path, capsys, monkeypatch, where):
    """A model the estimate let through that ran out of memory at its first step (or its step-0 evaluation) left its
    folder with config.json, meta.json, metrics.jsonl and .lock, and the same command with a smaller model was then
    refused as "a run with a different config". Now the folder is left as the start found it: none made, or a
    folder of the user's own left empty."""
    import torch

    from psattn.training import trainer

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(trainer._Run, "train_step" if where == "step" else "evaluate_and_log", out_of_memory)
    (tmp_path / "mine").mkdir()
    for run in (tmp_path / "r", tmp_path / "mine"):
        with pytest.raises(SystemExit) as stop:
            main(f"train --run-dir {run} --set train.steps=2 model.d_model=32 model.n_heads=2".split())
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "does not fit in memory" in err, err
    assert not (tmp_path / "r").exists() and list((tmp_path / "mine").iterdir()) == []


@pytest.mark.parametrize("module,command", [
    ("matplotlib", "plot {d}/run --out {d}/p.png"),
    ("onnxscript", "export --run-dir {d}/run --out {d}/m.onnx"),
    ("executorch", "export --format executorch --run-dir {d}/run --out {d}/m.pte"),
    ("transformers", "hf-demo"),
])
def test_a_missing_optional_library_names_its_extra(files, module, command, capsys, monkeypatch):
    for name in list(sys.modules):
        if name == module or name.startswith(module + ".") or name.startswith("psattn.integrations.hf."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import raises ModuleNotFoundError
    with pytest.raises(SystemExit) as stop:
        main(command.format(d=files).split())
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and err.startswith("psattn") and "error:" in err, err
    assert module in err and "pip install 'phase-space-attention[" in err, err


def test_a_model_beyond_the_memory_available_is_refused_before_anything_is_allocated(tmp_path, capsys, monkeypatch):
    """About 1.6 GiB of weights, gradients and moments, against 1 GiB available: one line with the
    numbers, and no run directory."""
    from psattn.training import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**30)
    with pytest.raises(SystemExit) as stop:
        main(f"train --run-dir {tmp_path / 'r'} --set model.d_model=1024 model.n_layers=8 model.n_heads=8".split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err, err
    assert "does not fit in memory on cpu" in err and "1.0 GiB is available" in err and "parameters" in err, err
    assert not (tmp_path / "r").exists()


def test_a_tokenizer_larger_than_the_model_vocabulary_is_refused_before_anything_is_written(tmp_path, capsys,
                                                                                           fresh_token_cache):
    pytest.importorskip("tokenizers")
    from psattn.textdata.tokenizer import BPETokenizer

    (tmp_path / "tok.json").write_text(BPETokenizer.train(["def f(x):\n    return x + 1\n"] * 50, 300).to_json())
    (tmp_path / "corpus.txt").write_text("def g(y):\n    return y * 2\n\n" * 100)
    with pytest.raises(SystemExit) as stop:
        main(f"train --run-dir {tmp_path / 'r'} --set task.name=text task.corpus={tmp_path}/corpus.txt "
             f"task.tokenizer={tmp_path}/tok.json model.vocab_size=256 model.d_model=32 model.n_heads=2 "
             "task.seq_len=16 train.steps=2 train.eval_size=4".split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and "ids, more than the model's vocabulary of 256" in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_an_export_named_after_a_run_file_leaves_the_run_whole(files, capsys):
    """An ONNX export to run/checkpoint.pt replaced the checkpoint, and the run no longer loaded."""
    before = (files / "run" / "checkpoint.pt").read_bytes()
    with pytest.raises(SystemExit):
        main(["export", "--run-dir", str(files / "run"), "--out", str(files / "run" / "checkpoint.pt")])
    assert (files / "run" / "checkpoint.pt").read_bytes() == before
    assert main(["eval", "--run-dir", str(files / "run")]) == 0


@pytest.mark.parametrize("command", [
    "eval --run-dir {d}/run --json {d}/run/checkpoint.pt",
    "footprint {d}/run --json {d}/run/checkpoint.pt",
    "export --run-dir {d}/run --out {d}/m.onnx --json {d}/run/checkpoint.pt",
    "certify --only causality --json {d}/run/checkpoint.pt",
    "eval --run-dir {d}/other --json {d}/run/config.json",
])
def test_a_json_output_named_after_a_run_file_is_refused_before_anything_is_written(files, command, capsys):
    """``--json PATH`` wrote its JSON over run/checkpoint.pt, and the run no longer loaded."""
    before = {name: (files / "run" / name).read_bytes() for name in ("checkpoint.pt", "config.json")}
    with pytest.raises(SystemExit) as stop:
        main(command.format(d=files).split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "is a file of the run directory" in err, err
    assert {name: (files / "run" / name).read_bytes() for name in before} == before


def test_a_json_output_in_a_folder_that_does_not_exist_is_written_there(files, capsys):
    """The folder is made (the command did its work, then failed with "No such file or directory")."""
    path = files / "new" / "sub" / "footprint.json"
    assert main(["footprint", str(files / "run"), "--json", str(path)]) == 0
    assert json.loads(path.read_text()) and [p.name for p in path.parent.iterdir()] == ["footprint.json"]


def test_an_export_json_named_after_its_own_output_is_refused(files, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["export", "--run-dir", str(files / "run"), "--out", str(files / "m.onnx"), "--json", str(files / "m.onnx")])
    assert stop.value.code == 2 and "would replace the export it describes" in capsys.readouterr().err
    assert not (files / "m.onnx").exists()


@pytest.mark.parametrize("command", ["train --run-dir= --set train.steps=2 model.d_model=32 model.n_heads=2",
                                     "theory bode --out=", "meanfield run --n 8 --out=", "demo --steps 1 --out="])
def test_an_empty_path_is_refused_and_nothing_lands_in_the_current_folder(tmp_path, monkeypatch, command, capsys):
    """``--run-dir ''`` (an unset shell variable) trained into the current folder, ``--out ''`` wrote there."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(command.split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "expected a path, got ''" in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_an_allocation_the_allocator_refuses_is_one_line(monkeypatch, capsys):
    """``hf-demo --prompt-length 100000000``: torch's allocator refused 51 GB, and a 60-line traceback ended it."""
    pytest.importorskip("transformers")
    from psattn.commands import hf_demo

    def refused(*args, **kwargs):
        torch.empty(2**62, dtype=torch.uint8)  # the allocator's own RuntimeError, at once

    monkeypatch.setattr(hf_demo, "tiny_random_model", refused)
    with pytest.raises(SystemExit) as stop:
        main(["hf-demo", "--prompt-length", "100000000"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "does not fit in memory" in err, err
    monkeypatch.setattr(hf_demo, "tiny_random_model", lambda *a, **k: torch.zeros(2) @ torch.zeros(3))
    with pytest.raises(RuntimeError):  # any other error is no user's: it stays a traceback
        main(["hf-demo"])


@pytest.mark.parametrize("text,key", [('{"train": {"steps": 5, "steps": 7}}', "steps"),
                                      ('{"train": {"steps": 5}, "model": {}, "train": {"lr": 0.1}}', "train")])
def test_a_config_giving_a_key_twice_is_refused(tmp_path, text, key, capsys):
    """json keeps the last of two values silently: the run trained 7 steps where the file also said 5."""
    (tmp_path / "twice.json").write_text(text)
    with pytest.raises(SystemExit) as stop:
        main(["train", "--config", str(tmp_path / "twice.json"), "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"gives the key '{key}' twice in one object" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["meanfield run --config {f} --out {d}/m", "theory fit-exponent {f}"])
def test_a_mean_field_config_or_sweep_results_giving_a_key_twice_is_refused(tmp_path, command, capsys):
    """The mean-field config and the sweep results that fit-exponent reads go through the same reader as a
    training config: a key given twice names the file and the key, and nothing is written."""
    twice = tmp_path / "twice.json"
    twice.write_text('{"n": 4, "n": 8}')
    with pytest.raises(SystemExit) as stop:
        main(command.format(f=twice, d=tmp_path).split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"{twice} gives the key 'n' twice in one object" in err, err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("command,message", [
    ('train --run-dir {d}/r --set model={"d_model":64,"d_model":32}', "gives the key 'd_model' twice in one object"),
    ('train --run-dir {d}/r --set model.attention={"gamma":0.5,"gamma":1}', "gives the key 'gamma' twice in one object"),
    ("train --run-dir {d}/r --set model.d_model=64 --set model.d_model=32", "'model.d_model=64' and 'model.d_model=32' "
     "both set model.d_model"),
    ('train --run-dir {d}/r --set model.d_model=64 model={"n_heads":2}', "both set model.d_model"),
    ("eval --run-dir {d}/run --set task.seq_len=32 task.seq_len=16", "both set task.seq_len"),
])
def test_set_giving_a_field_twice_is_refused(files, command, message, capsys):
    """json kept the last of two values silently, and of two overrides of one field the last won: which was meant?"""
    with pytest.raises(SystemExit) as stop:
        main(command.replace("{d}", str(files)).split())
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (files / "r").exists()


@pytest.mark.parametrize("run", ["missing", "corrupt"])
def test_theory_bode_reads_its_run_before_writing_a_figure(files, run, capsys):
    """A run directory that failed to load left --out with a new bode.png over the earlier one."""
    (files / "b").mkdir()
    (files / "b" / "bode.png").write_bytes(b"an earlier figure")
    with pytest.raises(SystemExit) as stop:
        main(["theory", "bode", "--run-dir", str(files / run), "--out", str(files / "b")])
    assert stop.value.code == 2 and len(capsys.readouterr().err.splitlines()) == 1
    assert [p.name for p in (files / "b").iterdir()] == ["bode.png"]
    assert (files / "b" / "bode.png").read_bytes() == b"an earlier figure"


@pytest.mark.parametrize(("fmt", "json_name"), [("onnx", "m.decode.onnx"), ("onnx", "m.int8-static.decode.onnx"),
                                                ("executorch", "m.int8.pte"), ("executorch", "m.int4.ptd")])
def test_an_export_json_named_after_a_file_written_beside_its_output_is_refused(files, capsys, fmt, json_name):
    """--json naming the decode graph (or a quantized copy) replaced it with the comparison's JSON."""
    out = files / ("m.onnx" if fmt == "onnx" else "m.pte")
    with pytest.raises(SystemExit) as stop:
        main(["export", "--format", fmt, "--run-dir", str(files / "run"), "--out", str(out), "--json", str(files / json_name)])
    assert stop.value.code == 2 and "would replace the export it describes" in capsys.readouterr().err
    assert not out.exists() and not (files / json_name).exists()


def test_export_json_with_the_hf_format_is_refused(files, capsys):
    """--format hf makes no comparison: --json was ignored without a word."""
    with pytest.raises(SystemExit) as stop:
        main(["export", "--format", "hf", "--run-dir", str(files / "run"), "--out", str(files / "hf"),
              "--json", str(files / "hf.json")])
    assert stop.value.code == 2 and "--json applies to --format onnx and executorch" in capsys.readouterr().err
    assert not (files / "hf").exists() and not (files / "hf.json").exists()


@pytest.mark.parametrize("form", ["onnx", "executorch"])
def test_exporting_a_key_lag_baseline_is_refused_in_one_line(form, tmp_path, monkeypatch, capsys):
    """The key-lag baselines (canon, kv_shift, ...) mix keys in a module of their own and keep no PSA cache,
    so no decode graph exists for them: refused before anything is written, and before the run's model is
    evaluated for the comparison (it was refused only once the eager logits, and generate, had run)."""
    pytest.importorskip("onnxruntime" if form == "onnx" else "executorch")
    from psattn.export import compare, compare_executorch

    config = apply_overrides(tiny_config(2), ["model.attention.variant=canon", "model.attention.gamma=0"])
    train(config, tmp_path / "canon")
    for module in (compare, compare_executorch):
        monkeypatch.setattr(module, "eval_batch", lambda config: pytest.fail("evaluated before the refusal"))
    with pytest.raises(SystemExit) as stop:
        main(["export", "--format", form, "--run-dir", str(tmp_path / "canon"), "--out", str(tmp_path / "out" / "m")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err == ["psattn: error: the key-lag baselines keep no PSA cache and cannot be "
                                            "exported with a decode step"]
    assert not (tmp_path / "out").exists()
