"""Whatever the package reads at run time ships in its wheel: every file git tracks under src/psattn that is not
Python source matches a ``[tool.setuptools.package-data]`` pattern in pyproject.toml (a corpus or config added
without one works from a checkout and fails from an installed wheel, which only CI's wheel check would see); and
``import psattn`` loads none of the extras' libraries."""

import fnmatch
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked_data_files() -> list[str]:
    """Paths, relative to src/psattn, of the files git tracks there that are not Python source."""
    listed = subprocess.run(["git", "ls-files", "src/psattn"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [Path(p).relative_to("src/psattn").as_posix() for p in listed.stdout.splitlines()]
    return [p for p in paths if not p.endswith(".py")]


def shipped(path: str, pattern: str) -> bool:
    """Whether setuptools' glob ``pattern`` takes ``path``: ``*`` stays within one folder, as in a glob."""
    parts, globs = path.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, globs, strict=True))


def test_every_data_file_of_the_package_is_in_its_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["psattn"]
    data = tracked_data_files()
    assert any(p.startswith("data/configs/") for p in data)  # the listing sees the shipped configs
    left_out = [p for p in data if not any(shipped(p, pattern) for pattern in patterns)]
    assert shipped("data/configs/mqar.json", "data/configs/*.json") and not shipped("a/b/c.json", "a/*.json")
    assert not left_out, f"not shipped in the wheel (add a package-data pattern in pyproject.toml): {left_out}"


#: the extras' libraries (pyproject.toml's optional dependencies), none of which ``import psattn`` may need
EXTRAS = ("transformers", "accelerate", "tokenizers", "matplotlib", "onnx", "onnxruntime", "onnxscript", "executorch",
          "torchao", "ray", "tensorboard", "scipy", "peft")


def test_import_psattn_and_its_names_load_none_of_the_extras():
    """docs/getting-started.md says ``import psattn`` needs only torch, numpy and tqdm, and docs/huggingface.md that it
    does not import transformers; no test looked. A new process imports psattn and every name of its ``__all__``."""
    import sys

    code = ("import sys, psattn\nfor name in psattn.__all__: getattr(psattn, name)\n"
            f"print([m for m in {EXTRAS!r} if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_the_distribution_and_extras_are_as_getting_started_names_them():
    """docs/getting-started.md names the distribution, what ``import psattn`` needs, the torch it asks for and the
    library each extra brings; nothing compared those sentences with pyproject.toml."""
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    page = " ".join((ROOT / "docs" / "getting-started.md").read_text().split())
    assert project["name"] == "phase-space-attention" and "The distribution is named `phase-space-attention`" in page
    needs = [re.split(r"[<>=]", d)[0] for d in project["dependencies"]]
    assert needs == ["torch", "numpy", "tqdm"] and "`import psattn` itself needs only torch, numpy and tqdm" in page
    assert "torch>=2.6" in project["dependencies"] and "The library itself asks for `torch>=2.6`" in page
    extras = project["optional-dependencies"]
    for extra, library, said in [("text", "tokenizers", "`text` (tokenizers:"), ("plot", "matplotlib", "`plot` (matplotlib:"),
                                 ("export", "onnx", "`export` (ONNX and"), ("export", "onnxruntime", "ONNX Runtime:"),
                                 ("hf", "transformers", "`hf` (transformers:")]:
        assert library in [re.split(r"[<>=\[]", d)[0] for d in extras[extra]] and said in page, extra
    for extra in ("executorch", "reproduce", "test"):  # installed by name on the page
        assert extra in extras and f"[{extra}]" in page, extra
