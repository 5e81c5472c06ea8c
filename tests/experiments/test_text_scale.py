"""text_scale: declared as the issue asks, its pilot first, its verdict read off the curves, and run end
to end at tiny size on the CPU (split by file, the corpus recorded in every summary)."""

import re
from pathlib import Path

import pytest

from psattn.experiments import at_scale
from psattn.experiments.declared import STUDIES
from psattn.experiments.studies import text_scale


def test_text_scale_declares_depths_with_mlps_three_attentions_two_seeds_and_its_pilot_first():
    configs = text_scale.text_scale("full")
    assert len({c.name for c in configs}) == len(configs) == 3 * 3 * 2
    assert {(c.model.n_layers, c.model.attention.variant, c.model.attention.gamma) for c in configs} == {
        (n, v, g) for n in (1, 2, 4) for v, g in (("baseline", 0.0), ("key_only", 1.0), ("symmetric", 1.0))}
    for c in configs:
        assert c.model.d_model == 256 and all(c.model.layer_mlps()) and c.task.seq_len == 256
        task = c.task
        assert (task.corpus, task.tokenizer, task.vocab_size, task.split) == ("python-installed:160MB", "bpe", 1024, "file")
        t = c.train
        assert (t.precision, t.device, t.seed in (0, 1), t.early_stop) == ("bf16", "cuda", True, False)
        assert t.steps * t.batch_size * c.task.seq_len == pytest.approx(80e6, rel=1e-3) and t.steps // t.eval_every == 40
    pilot = text_scale.text_scale_pilot("full")
    assert [c.name for c in configs[:3]] == [c.name for c in pilot]
    assert {(c.model.n_layers, c.model.attention.variant, c.train.seed) for c in pilot} == {(n, "baseline", 0) for n in (1, 2, 4)}
    assert {"text_scale", "text_scale_pilot"} <= set(STUDIES)
    low, high = text_scale.expected_minutes()
    assert 50 < low < high < 200
    with pytest.raises(ValueError, match="read them 3.0 times"):
        text_scale.check_repeats(80_000_000 // 3, configs[0])
    assert text_scale.check_repeats(60_000_000, configs[0]) == pytest.approx(80e6 / 60e6, rel=1e-3)


def run(layers, variant, gamma, seed, bpb, prefix):
    """A saved text run whose evaluations every 10M tokens have bits per byte ``bpb[i]`` and a best
    prefix-matching head ``prefix[i]``."""
    rows = [{"step": 0, "tokens": 0, "bits_per_byte": 8.0, "prefix_matching_score": [[0.0]] * layers}]
    for i, (b, p) in enumerate(zip(bpb, prefix, strict=True), 1):
        rows.append({"step": i, "tokens": i * 10_000_000, "bits_per_byte": b, "icl_score": -0.1,
                     "random_first_loss": 5.0, "random_second_loss": 4.0, "passage_first_loss": 2.0,
                     "passage_second_loss": 1.5, "induction_score": [[p]] * layers,
                     "previous_token_score": [[0.5]] * layers, "prefix_matching_score": [[0.01]] * (layers - 1) + [[p]]})
    config = {"name": f"{layers}{variant}{seed}", "model": {"n_layers": layers, "vocab_size": 1024,
              "attention": {"variant": variant, "gamma": gamma}},
              "task": {"name": "text", "seq_len": 256}, "train": {"seed": seed, "steps": 4, "batch_size": 16}}
    return config["name"], {"config": config, "history": rows, "corpus": {"train_tokens": 20_000_000}}


def test_the_verdict_answers_when_how_much_and_whether_it_matches():
    results = dict([
        run(2, "baseline", 0.0, s, [2.0, 1.8, 1.5, 1.4], [0.0, 0.0, 0.2, 0.3]) for s in (0, 1)] + [
        run(2, "key_only", 1.0, s, [1.7, 1.45, 1.35, 1.3], [0.2, 0.3, 0.3, 0.3]) for s in (0, 1)] + [
        run(1, "key_only", 1.0, s, [1.9, 1.7, 1.6, 1.55], [0.2, 0.2, 0.2, 0.2]) for s in (0, 1)] + [
        run(1, "baseline", 0.0, 0, [2.2, 2.1, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0])])
    rows = text_scale.scale_table(results)
    assert [(r["layers"], r["variant"]) for r in rows] == [(1, "baseline"), (1, "key_only"), (2, "baseline"), (2, "key_only")]
    two = rows[2]
    assert [c.tokens for c in two["phase_change"]] == [30_000_000] * 2 and two["repeats"] == 2.0
    assert two["prefix_matching_by_layer"] == [0.01, 0.3] and two["previous_token_by_layer"] == [0.5, 0.5]
    verdict = text_scale.scale_verdict(results, rows)
    depth2 = next(v for v in verdict if v.startswith("**2 layers**"))
    assert "(a) phase change at 10.0M tokens against 30.0M, 3.0× earlier" in depth2
    assert "(b) 1.300 bits per byte at the end against 1.400 (+0.100); the plain model does not reach it within 40M" in depth2
    depth1 = next(v for v in verdict if v.startswith("**1 layer**"))
    assert "where the plain model has none on every seed" in depth1
    match = next(v for v in verdict if v.startswith("(c) 1 layer, key_only γ=1 against 2 layers"))
    assert "at or below at 2 of 4 evaluations, from 10.0M to 20.0M tokens (1.550 against 1.400 at the end)" in match
    lines = text_scale.format_scale_table(rows)
    assert lines[4].startswith("| 2 layers, baseline | 2 | 1.400 ± 0.000 |")
    assert "| 0.50 / 0.50 | 0.01 / 0.30 | 30.0M, 30.0M |" in lines[4]
    pilot = text_scale.pilot_table(results)
    assert pilot[2:] == ["| 1 | none within 40.0M | 32.1M | 0M | — |", "| 2 | 30.0M | 32.1M | 0M | no |"]


def test_a_depth_with_only_its_plain_run_gets_one_clean_clause():
    """After the pilot alone (plain models only) the page says when each plain model's phase change came."""
    results = dict([run(1, "baseline", 0.0, 0, [2.2, 2.1, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0])])
    verdict = text_scale.scale_verdict(results, text_scale.scale_table(results))
    assert verdict == ["**1 layer**: the plain model shows no phase change on any seed."], verdict
    name = next(iter(results))
    results[name]["diverged_at"] = 1500  # its numbers are not those of the end of training: named, left out
    assert text_scale.scale_verdict(results, text_scale.scale_table(results)) == [
        f"Left out, diverged (the loss stopped being finite): {name} at step 1,500."]
    assert text_scale.pilot_table(results)[2:] == ["| 1 | diverged at step 1,500 | 32.1M | 0M | — |"]
    assert text_scale.scale_figure(results, "unused.png") is None  # nothing trained through: no figure, no file


def test_text_scale_runs_end_to_end_at_tiny_size_and_records_its_corpus(tmp_path):
    pytest.importorskip("tokenizers")
    from psattn.cli import main as psattn
    from psattn.experiments.saved_runs import load_summaries, write_summary

    out = tmp_path / "runs"
    assert psattn(["sweep", "text_scale", "--quick", "--out", str(out), "--time-limit", "600", "-q"]) == 0
    for c in text_scale.text_scale("quick"):
        write_summary(out / c.name, tmp_path / "gpu" / "text_scale")
    saved = load_summaries(tmp_path / "gpu" / "text_scale")
    corpus = next(iter(saved.values()))["corpus"]
    ops_sources = len(list((Path(text_scale.__file__).parents[2] / "ops").glob("*.py")))  # the quick corpus
    assert corpus["files"] == ops_sources and corpus["eval_tokens"] > 0 and len(corpus["files_sha256"]) == 16
    lines = at_scale.section("text_scale", tmp_path / "gpu" / "text_scale", "quick")
    assert any(line.startswith("Corpus ") and "held out by file" in line for line in lines)
    assert sum(line.startswith("| 1 layer") or line.startswith("| 2 layers") for line in lines) == 6
    assert any(line.startswith("(c) 1 layer, key_only γ=1 against 2 layers, baseline") for line in lines)
    [row] = at_scale.glance_rows(tmp_path / "gpu")
    assert row.startswith("| real text with MLPs past the phase change") and "2 layers: key-only " in row
    assert re.search(r"; cpu, \d{4}-\d\d-\d\d, git ", row)
    pytest.importorskip("matplotlib")
    assert text_scale.scale_figure(saved, tmp_path / "text_scale.png").read_bytes()[:4] == b"\x89PNG"
