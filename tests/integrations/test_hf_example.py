"""The worked example examples/hf_convert_to_psa.py runs end to end (at a toy budget)."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_convert_to_psa.py"


def test_conversion_example_runs_and_reports_three_models(tmp_path):
    spec = importlib.util.spec_from_file_location("hf_convert_to_psa", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--out", str(tmp_path), "--pretrain-steps", "6", "--finetune-steps", "4",
                         "--warmup-steps", "2", "--seq-len", "32", "--batch", "4", "--hidden", "32"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["rows"]) == 3
    assert all(0 < row["bits_per_byte"] < 20 for row in results["rows"].values())
    saved = json.loads((tmp_path / "psa" / "config.json").read_text())
    assert saved["model_type"] == "psattn_llama" and saved["psa"]["gamma"] == 1.0
    assert "| model |" in (tmp_path / "report.md").read_text()
