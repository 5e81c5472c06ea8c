"""text_phase: the first-copying rule, the end-of-training table, the clause-by-clause verdict, and the
report `psattn sweep text_phase` writes (tiny runs)."""

import dataclasses

import pytest

from psattn.cli import main
from psattn.experiments.declared import STUDIES
from psattn.experiments.phase_change import detect_copying
from psattn.experiments.studies import text_phase as tp


def evaluation(step, copy, prefix=0.02, icl=-0.1, bpb=2.0):
    return {"step": step, "tokens": step * 512, "seconds": step / 100, "icl_score": icl, "bits_per_byte": bpb,
            "random_first_loss": 7.0, "random_second_loss": 7.0 - copy, "passage_first_loss": 3.0,
            "passage_second_loss": 3.0 - copy, "prefix_matching_score": [[prefix, 0.01]],
            "induction_score": [[prefix / 2, 0.0]], "previous_token_score": [[0.2, 0.1]]}


def run(layers, variant, gamma, seed, copies, prefixes, icl=-0.1, bpb=2.0):
    config = tp.text_phase("quick")[0]
    model = dataclasses.replace(config.model, n_layers=layers,
                                attention=dataclasses.replace(config.model.attention, variant=variant, gamma=gamma))
    config = dataclasses.replace(config, model=model, train=dataclasses.replace(config.train, seed=seed))
    history = [evaluation(1000 * i, c, p, icl, bpb) for i, (c, p) in enumerate(zip(copies, prefixes, strict=True))]
    return {"config": config.to_dict(), "history": history}


def test_first_copying_is_the_random_tokens_copy_gain_held_for_two_evaluations():
    rows = [evaluation(0, 0.9), evaluation(1000, 0.1), evaluation(2000, 0.3), evaluation(3000, 0.2),
            evaluation(4000, 0.26), evaluation(5000, 0.5)]
    change = detect_copying(rows)  # step 0 never counts; 2000 is not confirmed at 3000
    assert (change.step, change.tokens, change.score) == (4000, 4000 * 512, pytest.approx(0.26))
    assert detect_copying(rows, threshold=0.6) is None


def test_a_phase_change_at_the_first_evaluation_records_the_icl_score_of_step_0_before_it():
    from psattn.experiments.phase_change import detect_phase_change

    rows = [evaluation(0, 0.0, 0.01, icl=-0.05), evaluation(1000, 0.0, 0.3, icl=-0.4), evaluation(2000, 0.0, 0.35, icl=-0.5)]
    change = detect_phase_change(rows)
    assert (change.step, change.icl_before, change.icl_at) == (1000, -0.05, -0.4)  # icl_before was None
    later = detect_phase_change([rows[0], evaluation(1000, 0.0, 0.05, icl=-0.1), *rows[2:], evaluation(3000, 0.0, 0.4)])
    assert (later.step, later.icl_before) == (2000, -0.1)
    last = [*rows[:1], evaluation(1000, 0.0, 0.05), evaluation(2000, 0.0, 0.3)]  # at the last evaluation: unconfirmed
    assert detect_phase_change(last) is None and detect_phase_change(last, confirm=1).step == 2000


def results_where_two_plain_layers_overtake():
    psa = [0.0, 0.4, 0.5, 0.5, 0.5, 0.5]
    plain = [0.0, 0.0, 0.1, 0.6, 0.9, 1.0]
    return {
        "psa0": run(1, "key_only", 1.0, 0, psa, [0.02, 0.3, 0.3, 0.3, 0.3, 0.3], icl=-0.2, bpb=1.9),
        "psa1": run(1, "key_only", 1.0, 1, [c + 0.02 for c in psa], [0.02, 0.3, 0.3, 0.3, 0.3, 0.3], icl=-0.2, bpb=1.9),
        "plain2": run(2, "baseline", 0.0, 0, plain, [0.02, 0.02, 0.05, 0.2, 0.3, 0.3], icl=-0.3, bpb=1.7),
        "plain1": run(1, "baseline", 0.0, 0, [0.0] * 6, [0.02] * 6, icl=-0.05, bpb=2.1),
        "smeared": run(1, "smeared_keys", 0.0, 0, [0.0, 0.3, 0.4, 0.4, 0.4, 0.4], [0.02, 0.2, 0.2, 0.2, 0.2, 0.2]),
    }


def test_the_table_and_the_verdict_read_each_clause_off_the_runs(tmp_path):
    results = results_where_two_plain_layers_overtake()
    rows = tp.phase_table(results)
    assert [(r["layers"], r["variant"]) for r in rows] == [(1, "baseline"), (1, "key_only"), (1, "smeared_keys"),
                                                           (2, "baseline")]
    psa = rows[1]
    assert psa["seeds"] == 2 and [c.tokens for c in psa["first_copying"]] == [1000 * 512] * 2
    assert [c.tokens for c in rows[3]["phase_change"]] == [3000 * 512] and rows[0]["first_copying"] == [None]
    lines = tp.format_phase_table(rows)
    assert lines[3].startswith("| 1 layer, key_only γ=1 | 2 | ") and "| 0.51 ± 0.01 |" in lines[3]
    assert lines[3].endswith("| 0.5M, 0.5M | 0.5M, 0.5M |") and lines[2].endswith("| — | — |")
    verdict = " ".join(tp.phase_verdict(results, rows))
    assert "1 layer, key_only γ=1: 0.5M, 0.5M" in verdict and "2 layers, baseline: 1.5M" in verdict
    assert "**one PSA layer does not match two plain layers** on the ICL score and passage copying and " \
           "random-token copying" in verdict
    assert "1.900 against 1.700 (+0.200" in verdict and "one plain layer: 2.100" in verdict
    assert "from 1.5M tokens on" in verdict and "transient" in verdict
    assert "**The learned key lag, smeared_keys**: smeared_keys ICL score" in verdict and "two plain layers ICL" in verdict
    pytest.importorskip("matplotlib")
    assert tp.phase_figure(results, tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_lasting_advantage_is_called_lasting():
    results = results_where_two_plain_layers_overtake()
    results["plain2"] = run(2, "baseline", 0.0, 0, [0.0, 0.0, 0.1, 0.2, 0.3, 0.3], [0.02] * 6, icl=-0.1, bpb=1.7)
    verdict = " ".join(tp.phase_verdict(results, tp.phase_table(results)))
    assert "the one-layer advantage lasts this budget" in verdict and "**one PSA layer matches two plain layers**" in verdict
    assert "— : not within 2.6M" in verdict and "2 layers, baseline: 2.0M" in verdict


def test_sweep_text_phase_writes_the_report_with_samples_and_onnx(tmp_path, capsys, monkeypatch):
    tiny = dataclasses.replace(tp._plan("quick"), models=((1, "key_only", 1.0), (2, "baseline", 0.0)), seeds=(0, 1),
                               steps=8, eval_every=4, seq_len=32, d_model=32, eval_size=8, vocab_size=512)
    monkeypatch.setattr(tp, "_plan", lambda mode: tiny)
    assert main(["sweep", "text_phase", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "real text past the phase change" in out and "| 1 layer, key_only γ=1 | 2 |" in out
    assert "**When each model starts copying**" in out and "**Its cost in bits per byte**" in out
    report = (tmp_path / "text_phase.md").read_text()
    assert f"report (figure, samples, ONNX sizes and speeds): {tmp_path / 'text_phase.md'}" in out
    assert "Hypothesis, stated before the run" in report and "![curves](text_phase.png)" in report
    assert "- **1 layer, key_only γ=1**: `" in report and "- **2 layers, baseline**: `" in report
    assert (tmp_path / "text_phase.png").stat().st_size > 1000
    pytest.importorskip("onnxruntime")
    assert "| 1 layer, key_only γ=1 | " in report.split("On a device")[1] and "ms per token" in report


def test_the_report_without_the_export_extra_says_how_a_wheel_user_installs_it(tmp_path, monkeypatch):
    from psattn.experiments import edge_report, text_report

    results = {f"m{i}": run(*model, 0, [0.0, 1.0, 1.5], [0.02, 0.3, 0.4]) for i, model in enumerate(tp.PHASE_MODELS[:2])}
    monkeypatch.setattr(text_report, "samples", lambda runs, configs, seed: {"a": {"prompt": "p", "continuation": "c"}})
    monkeypatch.setattr(edge_report, "edge_comparison", lambda *args, **kwargs: None)  # as without the export extra
    report = tp.phase_report(results, tmp_path).read_text()
    assert "(Not measured: install the export extra, `pip install 'phase-space-attention[export]'`.)" in report


def test_a_report_stopped_during_its_onnx_part_leaves_the_earlier_figure_and_report(tmp_path, monkeypatch):
    """The figure was drawn into the runs' folder before the ONNX part (minutes) and the report written after it: a
    Ctrl-C meanwhile left the new text_phase.png beside the earlier text_phase.md. Now both move in together."""
    pytest.importorskip("matplotlib")
    from psattn.experiments import edge_report, text_report

    def edge(*args, **kwargs):
        if stop:
            raise KeyboardInterrupt  # Ctrl-C while the models are exported and timed
        return None  # as without the export extra

    monkeypatch.setattr(text_report, "samples", lambda runs, configs, seed: {"a": {"prompt": "p", "continuation": "c"}})
    monkeypatch.setattr(edge_report, "edge_comparison", edge)
    stop = False
    tp.phase_report({f"m{i}": run(*model, 0, [0.0, 1.0, 1.5], [0.02, 0.3, 0.4])
                     for i, model in enumerate(tp.PHASE_MODELS[:2])}, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    stop = True
    with pytest.raises(KeyboardInterrupt):
        tp.phase_report({f"m{i}": run(*model, 0, [0.0, 0.2, 2.0], [0.02, 0.1, 0.4])
                         for i, model in enumerate(tp.PHASE_MODELS[:3])}, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # and no staging folder left


def test_the_docs_table_and_verdict_are_what_the_saved_runs_give():
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    saved = sorted((root / "docs" / "results" / "text_phase").iterdir())
    results = {d.name: load_result(d) for d in saved}
    assert len(results) >= len(tp.PHASE_MODELS) - 1 and all(r is not None for r in results.values())
    declared = {c.name for c in tp.text_phase("quick")}
    assert set(results) <= declared  # saved runs are declared runs, under their declared names
    study = STUDIES["text_phase"]  # its table and verdict, as `psattn sweep text_phase` prints them
    docs = (root / "docs" / "text.md").read_text()
    for line in study.table(results) + study.verdict(results):
        assert line in docs, line


def test_curves_that_cross_are_not_called_lasting_at_every_evaluation():
    results = results_where_two_plain_layers_overtake()
    results["plain2"] = run(2, "baseline", 0.0, 0, [0.0, 0.1, 0.6, 0.3, 0.7, 0.3], [0.02] * 6)  # ahead at 1.0M, 2.0M
    lasting = tp._lasting(results)
    assert "at or above two plain layers' at every evaluation" not in lasting and "the curves cross" in lasting
    assert "better than the key-only layer at 1.0M and at 2.0M tokens (seed means)" in lasting
    assert "at the end (0.51 against 0.30 nats)" in lasting and "not at every evaluation" in lasting


def test_the_report_on_the_saved_runs_says_samples_need_the_checkpoints_they_leave_out(tmp_path):
    import shutil
    from pathlib import Path

    from psattn.training.run_dir import load_result, run_tokenizer

    root = Path(__file__).resolve().parents[2]
    runs = Path(shutil.copytree(root / "docs" / "results" / "text_phase", tmp_path / "text_phase"))
    results = {d.name: load_result(d) for d in sorted(runs.iterdir())}
    with pytest.raises(ValueError, match="is a text run without its tokenizer.json"):  # not "only runs of the text task"
        run_tokenizer(next(iter(runs.iterdir())))
    report = tp.phase_report(results, runs).read_text()  # it raised that error, and wrote no report
    assert "(Not drawn: 7 seed-0 runs hold no checkpoint or tokenizer" in report and "**At the end" in report
    assert (runs / "text_phase.png").exists()


def test_the_readme_gives_two_plain_layers_phase_change_seed_by_seed_as_the_saved_runs_do():
    import re
    from pathlib import Path

    from psattn.experiments.phase_change import detect_phase_change
    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    runs = sorted((root / "docs" / "results" / "text_phase").glob("*-L2d128h4-attnonly-baseline-s*"))
    by_seed = ", ".join(f"{detect_phase_change(load_result(d)['history']).tokens / 1e6:.1f}" for d in runs) + "M"
    for page in ("README.md", "docs/reproduction.md"):  # they gave 5.4, 10.2, 19.2M: sorted, not by seed
        quoted = re.search(r"only after their phase change \(([\d.,M ]+) by seed\)", (root / page).read_text())
        assert quoted is not None and quoted.group(1) == by_seed == "10.2, 5.4, 19.2M", page


def test_the_copy_threshold_is_about_twice_the_gain_two_plain_layers_show_before_their_phase_change():
    """The docs said 0.25 nats is "more than twice" the 0.03-0.13 two plain layers show before their phase change; the
    saved context-64 pilot runs show 0.02 to 0.126 (before 3.9M and 7.8M tokens), so 0.25 is about twice the most."""
    from pathlib import Path

    from psattn.experiments.phase_change import COPY_THRESHOLD, detect_phase_change, random_copy_gain
    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    gains = []
    for run_dir in sorted((root / "docs" / "results" / "text_pilot").glob("*-c64-*")):
        rows = load_result(run_dir)["history"]
        change = detect_phase_change(rows)
        gains += [random_copy_gain(r) for r in rows if 0 < r["step"] < change.step]
    assert len(gains) > 10 and round(min(gains), 2) == 0.02 and round(max(gains), 2) == 0.13
    assert 1.9 < COPY_THRESHOLD / max(gains) < 2.1
    docs = " ".join((root / "docs" / "text.md").read_text().split())
    assert "two plain layers show 0.02 to 0.13 before their phase change in the pilot" in docs


def test_the_pages_prose_on_run_times_and_the_learned_lag_is_what_the_saved_runs_give():
    """text.md said a one-layer run took about 19 minutes and Canon 32 (Canon took 22), that smeared keys copy
    random tokens "almost perfectly" (their second copy's loss stays at about ln V) and that they have better
    bits per byte than any other one-layer model (Canon's are better)."""
    import math
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    results = {d.name: load_result(d) for d in sorted((root / "docs" / "results" / "text_phase").iterdir())}
    minutes = {layers: [r["seconds"] / 60 for n, r in results.items() if f"-L{layers}d128h4-" in n] for layers in (1, 2)}
    page = " ".join((root / "docs" / "text.md").read_text().split())
    assert [(round(min(m)), round(max(m))) for m in minutes.values()] == [(14, 22), (24, 28)]
    assert "14 to 22 minutes a one-layer run, 24 to 28 a two-layer one)" in page

    def last(name):
        return next(r["history"][-1] for n, r in results.items() if n.endswith(f"-L1d128h4-attnonly-{name}-s0"))

    smeared, canon = last("smeared_keys"), last("canon")
    assert round(smeared["random_second_loss"], 2) == 6.84 and round(math.log(1024), 2) == 6.93
    assert "though its second copy's loss, 6.84 nats, is still about the uniform guess's ln 1024 = 6.93" in page
    one_layer = {n: r["history"][-1]["bits_per_byte"] for n, r in results.items() if "-L1d128h4-" in n}
    fixed = [b for n, b in one_layer.items() if "smeared_keys" not in n and "canon" not in n]
    assert canon["bits_per_byte"] < smeared["bits_per_byte"] < min(fixed)
    assert "better bits per byte than the plain and fixed-shear one-layer models (1.544 against 1.581 to 1.604)" in page
    assert "almost perfectly" not in page and "better bits per byte than any other one-layer model" not in page


def test_the_page_says_its_device_rows_are_the_older_sweeps_which_now_writes_a_row_per_precision():
    """docs/text.md called its device rows what `psattn sweep text_phase` writes; they are one row per model with
    fp32 / INT8 columns, as the sweep wrote them on 2026-12-02, and it now writes one row per precision, static
    INT8 among them (edge_table), which the page did not say."""
    from pathlib import Path

    from psattn.experiments.edge_report import PRECISIONS, edge_table

    assert "INT8 static" in PRECISIONS and "| precision |" in edge_table({})[0]
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "text.md").read_text().split())
    assert "| model | parameters | fp32 / INT8 file |" in page
    assert ("These rows were written by the sweep of 2026-12-02; since 2026-12-03 it writes one row per precision, "
            "static INT8 among them, and these rows, like the samples, stay as written until the sweep is run again") in page
