"""The ``psattn hf-demo`` command and the guide's example of the transformers integration (docs/huggingface.md)."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from psattn.commands.hf_demo import register

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "huggingface.md"

def _parser():
    parser = argparse.ArgumentParser(prog="psattn")
    register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.parametrize("arch,variant", [("llama", "key_only"), ("smollm3", "symmetric")])
def test_hf_demo_runs_and_its_checks_pass(arch, variant, capsys):
    args = _parser().parse_args(["hf-demo", "--arch", arch, "--variant", variant, "--new-tokens", "5",
                                 "--prompt-length", "8"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("[ok]") == 3 and "FAIL" not in out


@pytest.mark.parametrize("flag,value", [("--prompt-length", "1"), ("--prompt-length", "0"), ("--new-tokens", "0")])
def test_hf_demo_refuses_sizes_it_cannot_run(flag, value):
    args = _parser().parse_args(["hf-demo", flag, value])
    with pytest.raises(ValueError, match=flag):
        args.func(args)


def test_the_guides_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S) if GUIDE.exists() else []
    examples = [b for b in blocks if "apply_psa" in b]
    assert examples, "docs/huggingface.md has no apply_psa example"
    for block in examples:
        exec(compile(block, "docs/huggingface.md", "exec"), {})


def test_hf_demo_prints_no_warnings_about_libraries_internals(tmp_path):
    """torchao, imported by transformers when installed, registers enums that torch's pytree warns about."""
    done = subprocess.run([sys.executable, "-m", "psattn", "hf-demo", "--new-tokens", "2", "--prompt-length", "4"],
                          capture_output=True, text=True, timeout=300, check=True)
    assert "_pytree" not in done.stderr and "Enum subclass" not in done.stderr, done.stderr
    refused = subprocess.run([sys.executable, "-m", "psattn", "export", "--format", "hf", "--run-dir", "no-such-run",
                              "--out", "x"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr  # the error line alone
