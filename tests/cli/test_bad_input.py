"""Every bad command line gets exit code 2 and a readable message, never a traceback."""

import json

import pytest

from helpers import tiny_config
from psattn.cli import main
from psattn.training.trainer import train


@pytest.fixture
def files(tmp_path):
    (tmp_path / "broken.json").write_text('{"model": {')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "wrongtype.json").write_text(json.dumps({"model": {"d_model": "big"}}))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00junk")
    train(tiny_config(2), tmp_path / "run")  # a finished induction run (no tokenizer)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text((tmp_path / "run" / "config.json").read_text())
    (tmp_path / "corrupt" / "checkpoint.pt").write_bytes(b"junk")
    return tmp_path


CASES = [
    # train
    ("train --config {d}/missing.json --run-dir {d}/r", "does not exist"),
    ("train --config {d}/broken.json --run-dir {d}/r", "not valid JSON"),
    ("train --config {d}/binary.json --run-dir {d}/r", "not valid JSON"),
    ("train --config {d}/list.json --run-dir {d}/r", "JSON object"),
    ("train --config {d}/wrongtype.json --run-dir {d}/r", "d_model"),
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
    ("train --run-dir {d}/r --time-limit -1", "time_limit"),
    ("train --run-dir {d}/run --set train.steps=3", "different config"),
    ("train --config {d}/corrupt/config.json --run-dir {d}/corrupt", "not a readable psattn checkpoint"),
    ("train --run-dir {d}/r --steps 3", "unrecognized arguments"),
    # demo, sweep, reproduce
    ("demo --steps 0 --out {d}/demo", "positive integer"),
    ("sweep variants --workers 0 --out {d}/s", "positive integer"),
    ("sweep nothing --out {d}/s", "invalid choice"),
    ("reproduce --workers -1 --out {d}/rep", "positive integer"),
    ("reproduce --quick --full", "not allowed with"),
    # export, generate
    ("export --run-dir {d}/missing --onnx {d}/m.onnx", "not a run directory"),
    ("export --run-dir {d}/corrupt --onnx {d}/m.onnx", "not a readable psattn checkpoint"),
    ("generate --run-dir {d}/missing --prompt hi", "no trained run"),
    ("generate --run-dir {d}/run --prompt hi", "no tokenizer.json"),
    # theory
    ("theory fit-exponent {d}/missing.json", "does not exist"),
    ("theory fit-exponent {d}/broken.json", "not valid JSON"),
    ("theory gamma-c --d-k 0 --T 10", "d_k"),
    ("theory gamma-c --d-k 16 --T 0", "context length"),
    ("theory gamma-c --d-k 16 --T 10 --c nan", "c must be"),
    ("theory bode --gamma nan --out {d}/b", "gamma must be finite"),
    # mean field
    ("meanfield run --n 0 --out {d}/m", "number of particles"),
    ("meanfield run --n -5 --out {d}/m", "number of particles"),
    ("meanfield run --beta nan --out {d}/m", "beta"),
    ("meanfield run --config {d}/missing.json --out {d}/m", "does not exist"),
    ("meanfield run --config {d}/list.json --out {d}/m", "JSON object"),
    # certificates, Hugging Face demo
    ("certify --only nothing", "nothing"),
    ("certify --operator nothing", "nothing"),
    ("hf-demo --new-tokens 0", "--new-tokens"),
    ("hf-demo --arch gpt2", "invalid choice"),
]


@pytest.mark.parametrize("command,message", CASES, ids=[c for c, _ in CASES])
def test_bad_input_exits_2_with_one_readable_line(files, command, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(command.format(d=files).split())
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("psattn") and "error:" in last and message in last, err
