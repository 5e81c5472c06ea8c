import argparse
import dataclasses
import itertools
import json

import pytest

from psattn.cli import main
from psattn.experiments.studies import induction


def test_demo_writes_a_report(tmp_path, capsys):
    assert main(["demo", "--steps", "4", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| baseline | 0 | 4 |" in report and "| key_only | 1 | 4 |" in report
    assert "held-out induction accuracy" in capsys.readouterr().out


def test_a_demo_report_cut_short_leaves_the_earlier_report_whole(tmp_path, monkeypatch, capsys):
    """A full disk as the report is written: one line naming report.md, and the earlier report as it was."""
    from helpers import file_size_limit
    from psattn.commands import demo

    argv = ["demo", "--steps", "4", "--out", str(tmp_path)]
    assert main(argv) == 0
    (tmp_path / "report.md").write_text("an earlier report\n")
    capsys.readouterr()
    write_text = demo.write_text

    def disk_full(path, text):
        with file_size_limit(200):
            write_text(path, text)

    monkeypatch.setattr(demo, "write_text", disk_full)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "report.md" in err, err
    assert (tmp_path / "report.md").read_text() == "an earlier report\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_demo_run_again_on_a_full_disk_fails_only_at_its_report(tmp_path, capsys):
    """The demo run again over its finished runs rewrote each run's metrics.jsonl and result.json, so on a full
    disk it failed naming a run's metrics.jsonl. Now the finished runs are read, and only report.md is written."""
    from helpers import file_size_limit

    argv = ["demo", "--steps", "4", "--out", str(tmp_path)]
    assert main(argv) == 0
    runs = {p: p.read_bytes() for p in tmp_path.glob("*/*") if p.name in ("metrics.jsonl", "result.json")}
    capsys.readouterr()
    with file_size_limit(200), pytest.raises(SystemExit) as stop:  # every file past 200 bytes: a full disk
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "report.md" in err, err
    assert len(runs) == 4 and all(path.read_bytes() == data for path, data in runs.items())


def test_a_demo_stopped_midway_resumes_when_run_again(tmp_path, monkeypatch, capsys):
    """A stop in the demo's second run said "run the same command without --restart to resume", but the same command
    trained both runs again from step 0, the finished first one too. Now it resumes the run cut short, exactly, and
    keeps the finished one."""
    from helpers import science
    from psattn.training import trainer

    train = trainer.train

    def stopped_in_key_only(config, run_dir, **kwargs):
        if "key_only" in config.name:
            steps = itertools.count(1)
            kwargs["should_stop"] = lambda: next(steps) >= 4  # polled after each step
        return train(config, run_dir, **kwargs)

    argv = ["demo", "--steps", "8", "--out", str(tmp_path / "stopped")]
    monkeypatch.setattr(trainer, "train", stopped_in_key_only)
    assert main(argv) == 128 + 15  # checkpointed at step 4, as a SIGTERM does
    assert "at step 4: checkpoint written in" in (err := capsys.readouterr().err) and "the same command again" in err
    baseline, key_only = (next((tmp_path / "stopped").glob(f"*-{v}-*")) for v in ("baseline", "key_only"))
    first = (baseline / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(trainer, "train", train)
    assert main(argv) == 0
    assert (baseline / "metrics.jsonl").read_bytes() == first  # kept, not trained again
    assert main(["demo", "--steps", "8", "--out", str(tmp_path / "whole")]) == 0
    whole = next((tmp_path / "whole").glob("*-key_only-*"))
    rows = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (key_only, whole)]
    assert science(rows[0]) == science(rows[1])


def test_a_demo_says_how_to_go_on_without_a_restart_flag(tmp_path, monkeypatch, capsys):
    """demo has no --restart, but its lines named it: a stop in a run trained anew over one of other --steps said
    "run the same command without --restart to resume" (the same command resumes it), and a finished run whose
    checkpoint is gone was refused with "use --restart to train it anew", then "this command has no --restart" after
    it; psattn train's refusal of that run still names --restart."""
    from psattn.training import trainer

    out = tmp_path / "demo"
    assert main(["demo", "--steps", "4", "--out", str(out)]) == 0
    train = trainer.train

    def stopped(config, run_dir, **kwargs):
        steps = itertools.count(1)
        return train(config, run_dir, should_stop=lambda: next(steps) >= 2, **kwargs)  # polled after each step

    monkeypatch.setattr(trainer, "train", stopped)
    assert main(["demo", "--steps", "8", "--out", str(out)]) == 128 + 15  # trained anew: other --steps
    err = capsys.readouterr().err
    assert "run the same command again to resume" in err and "--restart" not in err
    monkeypatch.setattr(trainer, "train", train)
    assert main(["demo", "--steps", "8", "--out", str(out)]) == 0  # as it said
    baseline = next(out.glob("*-baseline-*"))
    (baseline / "checkpoint.pt").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["demo", "--steps", "8", "--out", str(out)])
    err = capsys.readouterr().err
    assert "holds a finished run" in err and "--restart" not in err, err
    assert err.rstrip().endswith(f"; delete {baseline} and run the same command again to train it anew, or give it "
                                 "another --out"), err
    with pytest.raises(SystemExit):
        main(["train", "--run-dir", str(baseline)])
    err = capsys.readouterr().err
    assert "holds a finished run" in err and err.rstrip().endswith("; train it anew (psattn train --restart) or in "
                                                                   "another run directory"), err


def test_train_with_overrides_and_resume(tmp_path):
    args = ["train", "--run-dir", str(tmp_path), "--set", "train.steps=6", "train.eval_every=3",
            "train.eval_size=32", "train.batch_size=8", "model.d_model=32", "task.seq_len=16", "task.form=all_positions"]
    assert main(args) == 0
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 6
    assert main(args) == 0  # finished run: resumes and does nothing more
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # steps 0, 3 and 6


def test_a_signal_in_train_says_how_the_command_resumes(tmp_path, monkeypatch, capsys):
    """A stop of ``psattn train`` says to run the same command again; after --restart, to run it without the flag
    (the library's default names a call, ``train(..., resume=True)``, which a command-line user has not made)."""
    from psattn.training import trainer

    train = trainer.train
    monkeypatch.setattr(trainer, "train", lambda *a, **kw: train(*a, **kw, should_stop=lambda: True))
    args = ["train", "--run-dir", str(tmp_path), "--set", "train.steps=6", "train.eval_size=32", "train.batch_size=8",
            "model.d_model=32", "task.seq_len=16", "task.form=all_positions"]
    assert main(args) == 128 + 15
    assert "at step 1: checkpoint written in" in (err := capsys.readouterr().err) and "the same command again" in err
    assert main(args + ["--restart"]) == 128 + 15
    assert "run the same command without --restart to resume" in capsys.readouterr().err


def test_train_time_limit_stops_and_the_same_command_resumes(tmp_path, capsys):
    args = ["train", "--run-dir", str(tmp_path), "--set", "train.steps=6", "train.eval_every=3",
            "train.eval_size=32", "train.batch_size=8", "model.d_model=32", "task.seq_len=16", "task.form=all_positions"]
    assert main(args + ["--time-limit", "0"]) == 0
    assert "time limit reached at step 1 of 6" in capsys.readouterr().out
    assert not (tmp_path / "result.json").exists()
    assert main(args) == 0
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 6
    assert main(args + ["--restart", "--time-limit", "0"]) == 0
    assert "run the same command without --restart to resume" in capsys.readouterr().out


def test_bad_override_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run-dir", str(tmp_path), "--set", "model.attention.variant=sym"])
    assert exit_info.value.code == 2
    assert "unknown attention variant" in capsys.readouterr().err


def test_sweep_command_lists_results(tmp_path, capsys, monkeypatch):
    quick = induction.PLANS["quick"]
    grids = dataclasses.replace(quick.grids, control_steps=2, control_gammas=(0.0,))
    monkeypatch.setitem(induction.PLANS, "quick", dataclasses.replace(quick, grids=grids))
    assert main(["sweep", "controls", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "random_offset" in out and "multihop" in out and "final acc" in out
    summary = out.split("summary")[1]
    assert "task random_offset, gamma 0.0: 0/1 succeed" in summary and "task multihop, gamma 0.0" in summary


def test_a_critical_gamma_sweep_prints_the_critical_gamma_and_the_exponent(tmp_path, capsys, monkeypatch):
    quick = induction.PLANS["quick"]
    critical = dataclasses.replace(quick.critical, head_counts=(4, 2), head_count_gammas=(1.0,))
    training = dataclasses.replace(quick.training, steps=2)
    monkeypatch.setitem(induction.PLANS, "quick", dataclasses.replace(quick, critical=critical, training=training))
    assert main(["sweep", "critical_gamma", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out  # two steps learn nothing: no gamma of the grid succeeds
    assert "d_k 32: critical gamma > 1" in out and "d_k 64: critical gamma > 1" in out
    assert "exponent of gamma_c against d_k: no least-squares fit (0 bracketed values; 2 needed)" in out


def test_an_init_sensitivity_sweep_prints_the_attention_at_the_query_before_and_after_training(tmp_path, capsys,
                                                                                                 monkeypatch):
    quick = induction.PLANS["quick"]
    training = dataclasses.replace(quick.training, steps=2, single_steps=2)
    monkeypatch.setitem(induction.PLANS, "quick", dataclasses.replace(quick, training=training))
    assert main(["sweep", "init_sensitivity", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    table = out.split("attention at the single-answer query")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "entropy" not in line]
    # seed 0's key-only layer on the single-answer form at each of the three scales, before and after its 2 steps
    assert sorted((r.split(" | ")[0], r.split(" | ")[1]) for r in rows) == sorted(
        (f"| {init}", when) for init in ("0.02", "scaled", "torch") for when in ("initialisation", "step 2"))


def test_print_config_shows_the_resolved_config_and_trains_nothing(tmp_path, capsys):
    assert main(["train", "--print-config", "--set", "task.name=mqar", "model.attention.variant=key_only",
                 "model.attention.gamma=0.5"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["task"]["name"] == "mqar" and config["model"]["attention"] == {
        "variant": "key_only", "gamma": 0.5, "placement": "post_rope", "boundary": "replicate"}
    assert config["model"]["vocab_size"] == config["task"]["vocab_size"]
    with pytest.raises(SystemExit) as stop:
        main(["train", "--set", "train.steps=3"])
    assert stop.value.code == 2 and "--run-dir is required" in capsys.readouterr().err


def test_several_set_options_add_up(capsys):
    """A second --set replaced the first: this trained a plain model where key-only PSA was asked for."""
    assert main(["train", "--print-config", "--set", "model.attention.variant=key_only", "model.attention.gamma=1",
                 "--set", "train.steps=5"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["model"]["attention"]["variant"] == "key_only" and config["train"]["steps"] == 5
    from psattn.commands.evaluate import register

    parser = argparse.ArgumentParser(prog="psattn")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", "--run-dir", "r", "--set", "task.seq_len=16", "--set", "task.seed=3"])
    assert args.set == ["task.seq_len=16", "task.seed=3"]


def test_plot_draws_the_curves_of_several_runs(tmp_path, capsys):
    common = ["--set", "train.steps=4", "train.eval_every=2", "train.eval_size=16", "train.batch_size=8",
              "model.d_model=32", "task.seq_len=16", "task.form=all_positions"]
    for name, variant in (("plain", "baseline"), ("psa", "key_only")):
        assert main(["train", "--run-dir", str(tmp_path / name), *common, f"model.attention.variant={variant}"]) == 0
    out = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path / "plain"), str(tmp_path / "psa"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and f"figure: {out}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["plot", str(tmp_path / "psa"), "--metric", "bits_per_byte", "--out", str(out)])
    assert info.value.code == 2 and "no run logged ['bits_per_byte']" in capsys.readouterr().err


TINY = ["model.d_model=32", "model.n_heads=2", "train.eval_size=32", "train.threads=1"]


def test_train_says_what_it_does_on_stderr_and_why_it_stopped(tmp_path, capsys):
    """A start line and one line per evaluation on stderr (even piped), none with -q; the last line
    says the run stopped early, at which step of how many, and why."""
    run = str(tmp_path / "run")
    args = ["--run-dir", run, "--set", *TINY, "task.form=all_positions", "model.attention.variant=key_only",
            "model.attention.gamma=1.0", "train.steps=800", "train.eval_every=50", "train.early_stop=true",
            "train.threshold=0.03"]
    assert main(["train", *args]) == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert lines[0].startswith("training run: ") and "parameters on cpu, step 0 of 800, run directory" in lines[0]
    assert lines[1].startswith("step 50/800: held-out accuracy ")
    last = out.strip().splitlines()[-1]
    assert last.startswith("stopped early at step 50 of 800: held-out accuracy stayed at or above 0.03 for 1 evaluation")
    assert "emergence (accuracy >= 0.03) step 50" in last
    assert main(["-q", "train", *args[:-1], "train.threshold=0.04", "--run-dir", str(tmp_path / "quiet")]) == 0
    assert capsys.readouterr().err == ""


def test_a_text_run_ends_with_bits_per_byte_and_icl_score(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text("the cat sat on the mat.\n\n" * 200)
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--set", "task.name=text", f"task.corpus={tmp_path / 'text.txt'}",
                 "task.seq_len=32", *TINY, "train.steps=4", "train.eval_every=2", "train.batch_size=4"]) == 0
    out, err = capsys.readouterr()
    assert "held-out bits per byte" in out.strip().splitlines()[-1] and "ICL score" in out
    assert "accuracy" not in out.strip().splitlines()[-1] and "emergence" not in out
    assert "step 2/4: held-out bits per byte" in err


def test_the_demo_reports_its_setting_from_the_config_not_from_a_fixed_sentence():
    from psattn.commands.demo import describe_run
    from psattn.experiments.configs import small_config

    text = describe_run(small_config("key_only", 1.0, form="single", mlp=False, batch_size=32, lr=1e-3, n_layers=2))
    assert text.startswith("Model: 2 layers, d_model 128, 4 heads, RoPE, no MLP; task: single-answer induction")
    assert "AdamW lr 0.001, batch 32; held-out set of 512 rows." in text
    assert "task: full-sequence induction" in describe_run(small_config("key_only", 1.0, form="all_positions"))


def test_ctrl_c_while_the_command_line_loads_says_interrupted(tmp_path):
    """Torch takes seconds to import (once the command line is read, before the command runs); a Ctrl-C then gave
    a KeyboardInterrupt traceback."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    def default_ctrl_c():  # as from a terminal: a test process before this one may have left SIGINT ignored,
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # and a child would inherit that (and finish, rc 0)

    process = subprocess.Popen([sys.executable, "-m", "psattn", "eval", "--run-dir", str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=default_ctrl_c)
    # once torch's library is mapped the command line is read and its Ctrl-C handling in place, and torch's import
    # has seconds to go: no fixed sleep, which a loaded machine can make too short (a signal before the handler)
    def torch_mapped():
        try:
            return "libtorch" in Path(f"/proc/{process.pid}/maps").read_text()
        except OSError:  # not yet readable, or the process has ended (then the assertion below says how)
            return process.poll() is not None

    deadline = time.monotonic() + 60
    while not torch_mapped() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and err.strip() == "psattn: interrupted", err


def test_reproduce_help_gives_the_quick_runs_time_as_the_readme_and_docs_do(capsys):
    import re
    from pathlib import Path

    with pytest.raises(SystemExit):
        main(["reproduce", "-h"])
    said = re.findall(r"about (\d+) to (\d+) minutes", " ".join(capsys.readouterr().out.split()))
    root = Path(__file__).resolve().parents[2]
    written = {path: re.findall(r"about (\d+) to (\d+) minutes", " ".join((root / path).read_text().split()))
               for path in ("README.md", "docs/getting-started.md", "docs/reproduction.md")}
    assert len(said) == 1 and all(ranges == said for ranges in written.values()), (said, written)


def test_the_single_answer_commands_of_the_reproduction_page_resolve_as_written(capsys):
    """The page gave the key-only single-answer command and said "0.012 with `model.attention.variant=baseline`";
    that swap alone leaves gamma 1.0 on the baseline, which the config refuses, so the page names gamma 0 too."""
    import re
    import shlex
    from pathlib import Path

    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "reproduction.md").read_text().split())
    command = re.search(r"`(psattn train --run-dir R --set task.form=single [^`]*)`", page).group(1)
    swap = re.search(r"\(0\.012 with `([^`]*)`", page).group(1).split()
    argv = shlex.split(command)[1:]
    argv = ["train", "--print-config", *argv[argv.index("--set"):]]

    def swapped(overrides):
        values = dict(o.split("=", 1) for o in overrides)
        return [f"{a.split('=')[0]}={values.pop(a.split('=')[0])}" if a.split("=")[0] in values else a for a in argv]
    assert main(argv) == 0 and main(swapped(swap)) == 0
    assert '"variant": "baseline"' in capsys.readouterr().out
    with pytest.raises(SystemExit):  # the swap the page gave before: gamma stays 1.0
        main(swapped(["model.attention.variant=baseline"]))
    assert "gamma must be 0" in capsys.readouterr().err


def test_a_reader_that_closes_stdout_early_ends_the_command_quietly():
    """``psattn configs text | head -3`` said "psattn: error: [Errno 32] Broken pipe" and exited 2; now it ends
    without a word, with the shell's code for a process SIGPIPE ended (128 + 13), as ``yes | head`` does."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "psattn", "configs", "text"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader has gone before the command writes (it is still starting)
    err = process.stderr.read()
    assert process.wait(timeout=60) == 141 and err == "", err


def test_a_program_that_imports_the_command_line_keeps_its_own_ctrl_c():
    """Only the ``psattn`` command itself ends at once on a Ctrl-C while it loads; a program that imports
    ``psattn.cli`` (a test runner, a notebook) keeps its own handling."""
    import subprocess
    import sys

    code = "import psattn.cli as c; print(c._running_as_the_command(), c._SIGINT is None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]  # (``python -m psattn``: see the test above)


#: the optional libraries that take a second or more to import, each from its extra
OPTIONAL = ("transformers", "matplotlib", "scipy", "sympy", "onnx", "onnxruntime", "executorch", "torchao")


@pytest.mark.parametrize("argv,rc", [
    (["configs"], 0),
    (["export", "--format", "hf", "--run-dir", "no-such-run", "--out", "hf"], 2),
    (["plot", "no-such-run"], 2),
    (["certify", "--operator", "no-such-operator"], 2),
    (["theory", "bode", "--run-dir", "no-such-run", "--out", "bode"], 2),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_a_cheap_command_or_a_refusal_loads_no_optional_library(argv, rc, tmp_path):
    """A command that needs none of them, or one refused for its arguments: export --format hf loaded
    transformers (8 s) before it looked at --run-dir; plot, certify and theory bode loaded matplotlib or SymPy."""
    import subprocess
    import sys

    code = ("import atexit, sys\n"
            f"atexit.register(lambda: print([m for m in {OPTIONAL!r} if m in sys.modules]))\n"
            "from psattn.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == rc, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["train", "--help"], ["sweep", "-q"], ["configs"],
                                  ["configs", "mqar"], ["plot", "run", "--out", "curves.png"],
                                  ["theory", "gamma-c", "--d-k", "16", "64", "--context", "128"],
                                  ["theory", "fit-exponent", "sweep.json"]], ids=" ".join)
def test_help_version_refusals_and_configs_answer_without_torch(argv, tmp_path):
    """They imported torch (1.4 s of the 1.6 s they took): building the parser imported every command's module,
    and some of those imported torch-backed modules (or packages that import theirs all). psattn plot, which
    reads metrics.jsonl files and draws them, imported it before it ran, and so did theory gamma-c and
    fit-exponent, whose arithmetic is NumPy's (psattn.theory imported its torch-backed modules at once)."""
    import subprocess
    import sys

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 0, "eval_accuracy": 0.1, "eval_loss": 3.0}\n'
                                                     '{"step": 10, "eval_accuracy": 0.5, "eval_loss": 2.5}\n')
    (tmp_path / "sweep.json").write_text("[[16, 0.5], [64, 0.3], [256, 0.2]]")
    code = ("import atexit, sys\natexit.register(lambda: print('torch' in sys.modules))\n"
            "from psattn.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == (2 if argv[0] == "sweep" else 0), done.stderr
    assert done.stdout.splitlines()[-1] == "False", done.stdout
    if argv[0] == "plot":  # the figure torch-loaded psattn draws, byte for byte
        assert done.stdout.splitlines()[:-1] == ["figure: curves.png"], done.stdout
        assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "with_torch.png")]) == 0
        assert (tmp_path / "curves.png").read_bytes() == (tmp_path / "with_torch.png").read_bytes()
    if argv[0] == "theory":  # what torch-loaded psattn says, word for word
        import contextlib
        import io
        import os

        said, here = io.StringIO(), os.getcwd()
        os.chdir(tmp_path)
        try:
            with contextlib.redirect_stdout(said):
                assert main(argv) == 0
        finally:
            os.chdir(here)
        assert done.stdout.splitlines()[:-1] == said.getvalue().splitlines(), done.stdout


def test_a_sweep_whose_run_diverges_says_which_in_one_line(tmp_path, monkeypatch, capsys):
    """psattn train said it in one line; psattn sweep ended in a TrainingDiverged traceback."""
    from psattn.training import loss as loss_module

    real_loss = loss_module.shard_loss
    monkeypatch.setattr(loss_module, "shard_loss", lambda *a: real_loss(*a) * float("nan"))
    assert main(["sweep", "paper_scale", "--quick", "--time-limit", "60", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("psattn: error: run paper_scale-") and "loss became nan at step 0" in err[-1], err
    assert "(and 15 more runs diverged; their results record where)" in err[-1]  # a sweep in pieces goes on
    assert main(["sweep", "paper_scale", "--quick", "--time-limit", "60", "--out", str(tmp_path)]) == 0  # all ended
    assert "diverged at 0" in capsys.readouterr().out  # paper_scale's table names them
    assert main(["sweep", "mqar", "--quick", "--time-limit", "60", "--out", str(tmp_path / "mqar")]) == 1
    monkeypatch.setattr(loss_module, "shard_loss", real_loss)
    assert main(["sweep", "mqar", "--quick", "--workers", "1", "--out", str(tmp_path / "mqar")]) == 1  # no table
    captured = capsys.readouterr()
    assert "its table has no place for them" in captured.err and "succeed" not in captured.out


def test_a_sweep_whose_worker_was_killed_ends_in_one_line(tmp_path, monkeypatch, capsys):
    """A worker's SIGKILL (the out-of-memory killer) ended psattn sweep in a BrokenProcessPool traceback."""
    from psattn.experiments import sweep
    from psattn.training.signals import WorkerLost

    def killed(*args, **kwargs):
        raise WorkerLost("a worker process training run0 was ended by SIGKILL (...): run the same command again")

    monkeypatch.setattr(sweep, "run_sweep", killed)
    assert main(["sweep", "variants", "--quick", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "psattn: error: a worker process training run0 was ended by SIGKILL (...): run the same command again"]
