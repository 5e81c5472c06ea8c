"""docs/hf_support.md lists every causal-LM model type of the installed transformers, as the code decides."""

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from psattn.integrations.hf.support import REFUSED, TESTED, UNTESTED, support_page, support_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "hf_support.md"


def _rows() -> dict[str, str]:
    rows = [line.split(" | ") for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    return {cells[0].strip("| `"): cells[1] for cells in rows}


def test_the_table_has_every_causal_lm_type_as_supported_refused_or_untested_with_why():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rows = _rows()
    assert set(rows) == set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert {t for t, s in rows.items() if s == "supported"} == set(TESTED)
    assert {t for t, s in rows.items() if s == "refused"} == set(REFUSED)
    assert {t for t, s in rows.items() if s == "untested"} == set(UNTESTED)


def test_the_readme_and_the_guide_give_the_count():
    count = f"{len(TESTED)} transformers model types"
    assert count in (ROOT / "README.md").read_text()
    assert count in (ROOT / "docs" / "huggingface.md").read_text()
    assert f"**{len(TESTED)} supported**" in PAGE.read_text()


def test_the_page_is_what_the_code_generates():
    """Runs the dry run on a tiny model of every tested and refused type (about 15 s of one CPU core)."""
    regenerate = "python -m psattn.integrations.hf.support > docs/hf_support.md"
    assert PAGE.read_text() == support_page(support_rows()), f"the page is out of date: {regenerate}"


def test_a_model_that_keeps_its_decoding_state_in_its_modules_is_refused():
    """RecurrentGemma passed the dry run, and at γ = 0 its greedy decoding with PSA's cache departed from the base
    model's after the first step: its recurrent blocks reset their state only when the model makes its own cache."""
    from psattn.integrations.hf import apply_psa
    from psattn.integrations.hf.support import tiny_model

    with pytest.raises(NotImplementedError, match="RecurrentGemmaRecurrentBlock keeps its decoding state in the module"):
        apply_psa(tiny_model("recurrent_gemma"), "symmetric", 0.0)
