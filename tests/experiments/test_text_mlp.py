"""text_mlp: text_phase's setting and models with an MLP in every block, and the sweep end to end (tiny runs)."""

import dataclasses

import pytest

from psattn.cli import main
from psattn.experiments.declared import STUDIES
from psattn.experiments.induction_report import LEFT_OUT
from psattn.experiments.studies import text_mlp as tm


def test_every_run_is_its_attention_only_counterpart_with_mlps():
    phase = {(c.model.n_layers, c.model.attention.variant): c for c in STUDIES["text_phase"].plan("quick")
             if c.train.seed == tm.SEED}
    configs = STUDIES["text_mlp"].plan("quick")
    assert [(c.model.n_layers, c.model.attention.variant, c.model.attention.gamma) for c in configs] == list(tm.MLP_MODELS)
    for c in configs:
        twin = phase[(c.model.n_layers, c.model.attention.variant)]
        assert c.model.mlp is True and twin.model.mlp is False
        assert c.name == twin.name.replace("text_phase-", "text_mlp-").replace("-attnonly-", "-mlp-")
        assert dataclasses.replace(c, name=twin.name, model=dataclasses.replace(c.model, mlp=False)) == twin
    assert "text_mlp" in LEFT_OUT["quick"] and "text_mlp" in LEFT_OUT["full"]


def test_sweep_text_mlp_prints_the_table_and_verdict_and_draws_the_figure(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    tiny = dataclasses.replace(tm.plan("quick"), models=((2, "baseline", 0.0), (1, "key_only", 1.0)), steps=8,
                               eval_every=4, seq_len=32, d_model=32, eval_size=8, vocab_size=512)
    monkeypatch.setattr(tm, "plan", lambda mode: tiny)
    assert main(["sweep", "text_mlp", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "real text with an MLP in every block" in out and "| 1 layer, key_only γ=1 | 1 |" in out
    assert "**When each model starts copying**" in out and "Two plain layers' phase change" in out
    assert f"figure: {tmp_path / 'text_mlp.png'}" in out and (tmp_path / "text_mlp.png").stat().st_size > 1000
    assert {d.name for d in tmp_path.iterdir() if d.is_dir()} >= {c.name for c in tm.text_mlp("quick")}
