"""A full disk: a one-line error naming the file, nothing half written left behind (the tests on a small
tmpfs need root, and are skipped otherwise; a file size limit stands in for a full disk without it)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import psattn
from helpers import science, tiny_config
from psattn.cli import main
from psattn.training.trainer import train

SOURCES = [Path(psattn.__file__).resolve().parents[1], Path(__file__).resolve().parents[1]]  # psattn's, and helpers'


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a tmpfs of 96 KiB: room for a run's config and metrics, not for its checkpoint."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:  # still mapped (a loaded model)
        subprocess.run(["umount", "--lazy", str(mount)], check=False)  # detached now, freed once unmapped


def test_a_checkpoint_that_does_not_fit_is_one_line_and_leaves_no_temporary_file(small_disk, capsys):
    run = small_disk / "run"
    config = tiny_config(20)
    config.model.d_model = 64  # a checkpoint of about 800 KB
    (small_disk / "config.json").write_text(__import__("json").dumps(config.to_dict()))
    with pytest.raises(SystemExit) as stop:
        main(["train", "--config", str(small_disk / "config.json"), "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err, err
    assert "checkpoint.pt failed" in err and "Is the disk full?" in err, err
    assert not list(run.glob(".*.tmp")) and not (run / "checkpoint.pt").exists()


def test_an_export_that_does_not_fit_removes_its_partial_files(tmp_path, small_disk, capsys):
    pytest.importorskip("onnxruntime")
    train(tiny_config(2), tmp_path / "run")
    with pytest.raises(SystemExit) as stop:
        main(["export", "--run-dir", str(tmp_path / "run"), "--out", str(small_disk / "model.onnx"), "--int8"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err, err
    assert list(small_disk.iterdir()) == [], err  # nothing partial left
    assert f"exporting to {small_disk / 'model.onnx'} failed" in err and "Is the disk full?" in err, err


def test_the_small_disk_is_really_small(small_disk):
    """The fixture itself: writing more than it holds fails (so the tests above test a full disk)."""
    with pytest.raises(OSError):
        (small_disk / "big").write_bytes(b"0" * 200_000)
    assert sys.platform.startswith("linux")


def test_an_hf_export_that_does_not_fit_leaves_the_earlier_export_whole(tmp_path, small_disk, capsys):
    """A key-only export fits; a baseline export into the same folder runs out of room while writing its
    weights: the key-only export stays whole (its config beside its own weights), and loads."""
    pytest.importorskip("transformers")
    train(tiny_config(2), tmp_path / "key_only")
    baseline = tiny_config(2)
    baseline.model.attention.variant, baseline.model.attention.gamma = "baseline", 0.0
    train(baseline, tmp_path / "baseline")
    out = small_disk / "hf"
    assert main(["export", "--format", "hf", "--run-dir", str(tmp_path / "key_only"), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SystemExit) as stop:
        main(["export", "--format", "hf", "--run-dir", str(tmp_path / "baseline"), "--out", str(out)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and "Is the disk full?" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["hf"]
    from transformers import AutoModelForCausalLM

    import psattn.integrations.hf  # noqa: F401  # registers the psattn model type
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.psattn_model["attention"]["variant"] == "key_only"


FULL_AT_STEP = """
import os, resource, signal, sys
from helpers import tiny_config
from psattn.training.trainer import train
run = sys.argv[1]

def fill(step, loss):  # from here on no file may grow past 10 more bytes than metrics.jsonl holds now
    if step == 15:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        limit = os.path.getsize(os.path.join(run, "metrics.jsonl")) + 10
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

try:
    train(tiny_config(40, eval_every=4), run, on_step=fill)
except OSError as err:
    print(err)
"""


def test_a_metrics_row_that_does_not_fit_is_one_line_naming_the_file_and_no_half_row(tmp_path):
    """The row of step 16 gets 10 bytes of room and fails: cut back off, and the error names the file."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in SOURCES)}
    done = subprocess.run([sys.executable, "-c", FULL_AT_STEP, str(tmp_path / "run")], env=env, capture_output=True,
                          text=True, timeout=120)
    said = done.stdout.strip()
    assert done.returncode == 0 and f"writing {tmp_path / 'run' / 'metrics.jsonl'} failed" in said, (said, done.stderr)
    assert "its earlier lines are intact" in said and len(said.splitlines()) == 1, said
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 4, 8, 12]
    resumed = train(tiny_config(40, eval_every=4), tmp_path / "run")  # from the checkpoint of step 10
    assert science(resumed.history) == science(train(tiny_config(40, eval_every=4)).history)
