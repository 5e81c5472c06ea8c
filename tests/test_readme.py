"""The README's quick-start snippet runs as written, its set-up commands stay in place, every python block
of the docs pages runs, and the glance table is the same in the README and in docs/reproduction.md."""

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_snippet_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python block"
    exec(compile(blocks[0], "README.md", "exec"), {})


def test_setup_commands_at_the_top():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "psattn reproduce --quick" in commands[0] and "pytest" in commands[1]
    assert all("torch==2.13.0" in c for c in commands)


DOCS = README.parent / "docs"


#: pages whose blocks take minutes (ExecuTorch's export), run by their own slow test
SLOW_PAGES = {"exported.md"}


def _run_page(page: Path) -> int:
    """Run ``page``'s python blocks in order in one namespace; the number run. A warning that a page's own line
    raises (torch's on ``float`` of a tensor that requires grad, say) fails it: a reader sees it too."""
    namespace: dict = {}
    name = str(page.relative_to(README.parent))
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for block in blocks:
            exec(compile(block, name, "exec"), namespace)
    own = [f"{name}:{w.lineno}: {w.category.__name__}: {w.message}" for w in seen if w.filename == name]
    assert not own, own
    return len(blocks)


@pytest.fixture(scope="session")  # not torn down when other modules' tests run between its tests
def getting_started() -> tuple[int, str]:
    """docs/getting-started.md's python blocks, run once as every page's are: the number run and what they
    printed. Its first-model block trains two models (about 10 s); its test reads the lines they print."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ran = _run_page(DOCS / "getting-started.md")
    return ran, printed.getvalue()


def test_every_python_block_of_the_docs_pages_runs(getting_started):
    """Each page's blocks run in order in one namespace (a later block may use an earlier one's names)."""
    ran = getting_started[0]
    for page in sorted(p for p in DOCS.glob("*.md") if p.name not in SLOW_PAGES | {"getting-started.md"}):
        ran += _run_page(page)
    assert ran >= 2


@__import__("pytest").mark.slow  # exports to ONNX and ExecuTorch and decodes in both runtimes: about a minute
def test_the_run_the_exported_model_page_runs():
    """docs/exported.md: the ONNX Runtime and ExecuTorch cache loops give PyTorch's greedy tokens."""
    pytest = __import__("pytest")
    for module in ("onnxruntime", "onnxscript", "executorch"):
        pytest.importorskip(module)
    assert _run_page(DOCS / "exported.md") == 3


def _glance(text: str) -> list[str]:
    start = text.index("| | ours (quick) | paper |")
    return text[start:].split("\n\n")[0].splitlines()


def test_the_glance_table_is_the_same_in_the_readme_and_the_docs():
    assert _glance(README.read_text()) == _glance((DOCS / "reproduction.md").read_text().replace("](", "](docs/")
                                                   .replace("](docs/reproduction.md#", "](docs/reproduction.md#"))


def test_the_executorch_sentences_of_the_reproduction_say_what_its_table_gives():
    """The page said ExecuTorch's programs take "1.5 to 2 times" as long per token as ONNX Runtime's fp32 graphs; its
    own table gives 1.37 (two plain layers, int8) to 1.94 (one key-only layer, fp32)."""
    page = (DOCS / "reproduction.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines()
            if line.startswith("| ") and "| ExecuTorch " in line]
    assert len(rows) == 4
    onnx = {row[0]: float(re.search(r"ONNX Runtime fp32 ([\d.]+)", row[3]).group(1)) for row in rows if "ONNX" in row[3]}
    ratios = [float(row[3].split()[0]) / onnx[row[0]] for row in rows]
    top1 = {row[0]: row[4] for row in rows if row[1] == "ExecuTorch int8"}
    kl = [float(row[5]) for row in rows if row[1] == "ExecuTorch int8"]
    text = " ".join(page.split())
    assert f"take {min(ratios):.1f} to {max(ratios):.1f} times as long per token as ONNX Runtime's fp32 graphs" in text
    higher = f"{kl[0] - kl[1]:.0e}".replace("e-0", "e-")  # the page writes 2e-6
    assert f"({top1['1 layer, key-only γ = 1']} against {top1['2 layers, plain']}) at a KL {higher} higher" in text


@__import__("pytest").mark.slow  # trains, samples, scores, plots, exports twice and imports transformers: about a minute
def test_the_getting_started_commands_run_as_written_in_an_empty_folder(tmp_path):
    """The tutorial's shell block, run by scripts/run_getting_started.py (what CI runs from the wheel) in an
    empty folder, with 20 training steps: it needs nothing that only a checkout has."""
    import os
    import subprocess
    import sys

    pytest = __import__("pytest")
    if os.environ.get("PSATTN_CI_RUNS_THE_WHEEL_TUTORIAL") == "1":
        pytest.skip(".ci/run runs the same script from the wheel, beside the tests")
    for module in ("tokenizers", "onnxruntime", "matplotlib", "transformers"):
        pytest.importorskip(module)
    bin_dir = tmp_path / "bin"  # `psattn` and `python` on PATH are this interpreter, as in a virtualenv
    bin_dir.mkdir()
    for name, argv in (("psattn", f"{sys.executable} -m psattn"), ("python", sys.executable)):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        (bin_dir / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, str(README.parent / "scripts" / "run_getting_started.py")], cwd=work,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    run = work / "runs" / "mine"
    for made in ("result.json", "curves.png", "model.onnx", "model.int8-dynamic.onnx", "hf/config.json"):
        assert (run / made).exists(), made
    assert done.stdout.count("--- sample ") == 2
    commands = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("$ ")]
    assert commands == ["psattn"] * 6 + ["python"]
    assert done.stdout.rsplit("$ python", 1)[1].split("\n", 1)[1].startswith("def forward(self, x):")  # the reloaded model


def test_the_first_model_tutorial_prints_what_the_page_says(getting_started):
    """docs/getting-started.md's first-model block, run (with the page's other blocks, by the fixture): the plain
    layer stays where counting alone gets, the key-sheared one learns (the page quotes this machine's numbers; float rounding may
    move them a little elsewhere)."""
    text = (DOCS / "getting-started.md").read_text()
    block = re.search(r"## Your first PSA model.*?```python\n(.*?)```", text, flags=re.S).group(1)
    assert "print(variant, f\"held-out accuracy" in block  # the lines read below are this block's
    printed = dict(re.findall(r"(baseline|key_only) held-out accuracy ([0-9.]+, emergence step \w+)", getting_started[1]))
    quoted = dict(re.findall(r"`(baseline|key_only) held-out accuracy ([0-9.]+, emergence step\s+\w+)`", text))
    assert set(printed) == set(quoted) == {"baseline", "key_only"}
    for variant, line in printed.items():
        accuracy, step = line.split(", emergence step ")
        want_accuracy, want_step = " ".join(quoted[variant].split()).split(", emergence step ")
        assert abs(float(accuracy) - float(want_accuracy)) < 0.05 and (step == "None") == (want_step == "None")


def test_the_first_model_numbers_the_page_quotes_are_those_of_its_saved_run():
    """docs/getting-started.md quoted the first-model block's two lines and "about 15 seconds" from a run that saved
    nothing: the page's lines and time are now those of the run saved in docs/results/cpu/first_model."""
    text = (DOCS / "getting-started.md").read_text()
    log = (DOCS / "results" / "cpu" / "first_model" / "2026-12-08.txt").read_text()
    quoted = [" ".join(line.split()) for line in re.findall(r"`((?:baseline|key_only) held-out accuracy .*?)`", text, flags=re.S)]
    assert quoted == [line for line in log.splitlines() if " held-out accuracy " in line]
    seconds = float(re.search(r"^real\t0m([0-9.]+)s$", log, flags=re.M).group(1))
    said = re.search(r"again on 2026-12-08 in ([0-9.]+) seconds on one core", " ".join(text.split())).group(1)
    assert said == f"{seconds:.1f}" and "about 15 seconds" in text and abs(seconds - 15) < 5


def test_the_wheel_the_install_lines_name_is_the_one_pip_wheel_builds():
    """`pip wheel --no-deps -w dist .` writes dist/phase_space_attention-VERSION-py3-none-any.whl: every install line
    names that file (docs/index.md named it without its dist/ folder)."""
    version = re.search(r'^version = "(.+)"$', (README.parent / "pyproject.toml").read_text(), flags=re.M).group(1)
    named = [(page.name, wheel) for page in [README, *sorted(DOCS.glob("*.md"))]
             for wheel in re.findall(r"\S*phase_space_attention-\S*?\.whl", page.read_text())]
    assert named, "no page names the wheel"
    built = (f"dist/phase_space_attention-{version}-py3-none-any.whl", "dist/phase_space_attention-*.whl")
    for page, wheel in named:
        assert wheel.lstrip("\"'`") in built, (page, wheel)


def test_the_python_page_s_text_run_would_stop_early_under_the_default_training_config():
    """docs/python.md sets "early_stop": False, and says why: under TrainConfig's defaults its 60-step text run stops at
    step 30, when held-out next-token accuracy reaches the threshold 0.8."""
    import dataclasses

    text = (DOCS / "python.md").read_text()
    assert '"early_stop": False},' in text and "at step 30 of the 60" in text
    namespace: dict = {}
    block = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    exec(compile(block.split("result = train(")[0], "docs/python.md", "exec"), namespace)  # the config, untrained
    config = namespace["config"]
    assert config.train.threshold == 0.8
    from psattn.training.trainer import train

    result = train(dataclasses.replace(config, train=dataclasses.replace(config.train, early_stop=True)))
    assert result.stopped_early and result.steps == 30 and result.final_accuracy >= 0.8


def test_the_python_page_quotes_the_refusal_of_a_model_vocabulary_below_the_task_s():
    """docs/python.md quotes the words that refuse a BPE task of vocab_size 512 on a model of 256; nothing checked
    the quotation against the message the config raises."""
    from psattn.training.config import RunConfig

    quoted = re.search(r'refused: "(task vocabulary \(512\)[^"]*)"', (DOCS / "python.md").read_text()).group(1)
    with pytest.raises(ValueError) as refused:
        RunConfig.from_dict({"task": {"name": "text", "corpus": "austen", "tokenizer": "bpe", "vocab_size": 512},
                             "model": {"vocab_size": 256}})
    assert str(refused.value) == " ".join(quoted.split())  # the page wraps the quotation


def test_the_home_page_snippet_prints_the_shape_its_comment_gives():
    """docs/index.md's snippet ran in the every-page test, but nothing compared what it prints with the comment
    beside its print."""
    block = re.findall(r"```python\n(.*?)```", (DOCS / "index.md").read_text(), flags=re.S)[0]
    comment = re.search(r"^print\(out\.shape\)  # (.+)$", block, flags=re.M).group(1)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(compile(block, "docs/index.md", "exec"), {})
    assert printed.getvalue().strip() == comment == "torch.Size([1, 4, 16, 32])"
