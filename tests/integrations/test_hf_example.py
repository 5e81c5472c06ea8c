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


def test_the_worked_example_on_the_huggingface_page_is_its_saved_run():
    """docs/huggingface.md's worked-example table and the figures its prose quotes are what the saved run of
    ``examples/hf_convert_to_psa.py --threads 1`` gives (docs/results/hf_convert/results.json); before, the
    table had a command and a date but no saved result behind it."""
    spec = importlib.util.spec_from_file_location("hf_convert_to_psa", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    root = EXAMPLE.parents[1]
    saved = json.loads((root / "docs" / "results" / "hf_convert" / "results.json").read_text())
    page = (root / "docs" / "huggingface.md").read_text()
    for line in example.table(saved["rows"]).splitlines():
        assert line in page, line
    meta, args = saved["meta"], saved["args"]
    assert args["threads"] == 1 and meta["threads"] == 1
    assert (args["pretrain_steps"], args["finetune_steps"], args["warmup_steps"]) == (1000, 500, 100)
    said = " ".join(page.split())
    assert f"{meta['parameters'] / 1e3:.0f}k parameters" in said
    assert (f"Measured on {meta['started'][:10]} at git {meta['git_revision'][:7]} on this project's 2-core x86_64 "
            f"machine (torch {meta['torch_version']}, transformers {meta['transformers_version']}, one thread; "
            f"{sum(saved['seconds'].values()) / 60:.1f} min") in said
    plain, psa = (saved["rows"][name]["loss"] for name in ("+ plain fine-tune", "+ key-only PSA fine-tune (γ 0 → 1)"))
    assert f"({psa:.3f} against {plain:.3f} nats per token)" in said
