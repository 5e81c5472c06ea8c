"""The entry points' docstrings carry examples, and the examples run as written (doctest)."""

import doctest
import importlib

import pytest

#: the entry points a user starts from; each docstring has an Examples section that doctest runs
ENTRY_POINTS = [
    "psattn.ops.attention.psa_attention", "psattn.ops.attention.psa_attention_reference",
    "psattn.models.decoder.DecoderLM", "psattn.models.config.ModelConfig", "psattn.models.generate.generate",
    "psattn.training.trainer.train", "psattn.training.config.RunConfig", "psattn.training.run_dir.load_trained",
    pytest.param("psattn.export.onnx.export_onnx", marks=pytest.mark.slow),  # the ONNX exporter: about 10 s
    "psattn.models.generate.continue_text", "psattn.models.heads.head_scores",
]
#: the same, needing transformers (the hf extra)
HF_ENTRY_POINTS = ["psattn.integrations.hf.patch.apply_psa", "psattn.integrations.hf.patch.remove_psa",
                   "psattn.integrations.hf.patch.load_psa_model",
                   pytest.param("psattn.export.hf.export_hf", marks=pytest.mark.slow)]  # trains: ~15 s


def _run_examples(path: str) -> None:
    module, _, name = path.rpartition(".")
    obj = getattr(importlib.import_module(module), name)
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name) if t.examples]
    assert tests, f"{path} has no example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{path}: {runner.failures} example(s) failed (see the output above)"


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_the_entry_point_examples_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run_examples(path)


@pytest.mark.parametrize("path", HF_ENTRY_POINTS)
def test_the_hugging_face_entry_point_examples_run(path, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    _run_examples(path)
