"""The real-text figures the pages quote, read off the saved runs behind them: the quick reproduction's text table
and seed means in docs/reproduction.md (``psattn sweep text_seeds --quick``, docs/results/text_seeds) and the code
corpus's table in docs/text.md (``psattn sweep text_corpora``, docs/results/text_corpora)."""

import json
from pathlib import Path

from psattn.experiments.declared import STUDIES
from psattn.experiments.phase_change import best_head
from psattn.experiments.studies.text import mean_sd, model_key, summarise_text
from psattn.experiments.studies.text_corpora import copy_gain, curve_table, end_row
from psattn.models import ModelConfig
from psattn.models.presets import preset_parameter_count
from psattn.training.run_dir import load_result

ROOT = Path(__file__).resolve().parents[2]


def saved(study: str) -> dict:
    results = {d.name: load_result(d) for d in sorted((ROOT / "docs" / "results" / study).iterdir())}
    assert all(results.values()), [name for name, r in results.items() if r is None]
    assert set(results) <= {c.name for c in STUDIES[study].plan("quick")}
    return results


def revision(study: str, result: dict) -> str:
    """The short git revision a saved run of ``study`` was trained at (its meta.json)."""
    meta = json.loads((ROOT / "docs" / "results" / study / result["config"]["name"] / "meta.json").read_text())
    return meta["git_revision"][:7]


def said(page: str) -> str:
    return " ".join((ROOT / "docs" / page).read_text().split())


def _minus(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def test_the_quick_text_table_of_the_reproduction_page_is_what_the_saved_seed_0_runs_give():
    """The table's rows were a rerun's printout with no saved run behind them (2026-12-01); now each is rebuilt from
    the seed-0 run of docs/results/text_seeds, which trains the quick reproduction's configs."""
    results = saved("text_seeds")
    assert len(results) == 9
    page = (ROOT / "docs" / "reproduction.md").read_text()
    labels = {(1, "baseline", 0.0): "1 layer, baseline", (1, "key_only", 1.0): "1 layer, key-only γ = 1",
              (2, "baseline", 0.0): "2 layers, baseline"}
    for r in results.values():
        if r["config"]["train"]["seed"] != 0:
            continue
        last = r["history"][-1]
        first, second = last["passage_first_loss"], last["passage_second_loss"]
        params = preset_parameter_count(ModelConfig.from_dict(r["config"]["model"]))
        row = (f"| {labels[model_key(r)]} | {params:,} | {last['bits_per_byte']:.3f} | {_minus(last['icl_score'])} | "
               f"{first:.2f} / {second:.2f} ({first - second:.2f}) | {best_head(last, 'prefix_matching_score'):.3f} |")
        assert row in page, row


def test_the_seed_means_of_the_reproduction_page_are_what_the_saved_runs_give():
    rows = {(r["layers"], r["variant"]): r for r in summarise_text(saved("text_seeds"))}
    one, key, two = rows[(1, "baseline")], rows[(1, "key_only")], rows[(2, "baseline")]
    assert all(r["seeds"] == 3 for r in rows.values())
    page = said("reproduction.md")
    assert (f"copy gain {mean_sd(key['passage_copy_gain'], 2)} (one key-sheared layer), "
            f"{mean_sd(one['passage_copy_gain'], 2)} (one plain layer) and {mean_sd(two['passage_copy_gain'], 2)} "
            "(two plain layers)") in page
    icl = [mean_sd(r["icl_score"]).replace("-", "−") for r in (key, one, two)]
    assert f"ICL score {icl[0]}, {icl[1]} and {icl[2]}" in page
    bpb = [mean_sd(r["bits_per_byte"]) for r in (key, one, two)]
    assert f"bits per byte {bpb[0]}, {bpb[1]} and {bpb[2]}" in page



def test_the_code_table_of_the_text_page_is_what_the_saved_text_corpora_runs_give():
    """docs/text.md's python-stdlib table and the figures after it had only their commands and a date (2026-11-30);
    now they are rebuilt from text_corpora's saved runs."""
    results = saved("text_corpora")
    code = {model_key(r): r for r in results.values() if r["config"]["task"]["corpus"] == "python-stdlib"}
    assert set(code) == {(1, "key_only", 1.0), (2, "baseline", 0.0)}
    page = (ROOT / "docs" / "text.md").read_text()
    for line in curve_table(results, "python-stdlib"):
        assert line in page, line
    one, two = end_row(code[(1, "key_only", 1.0)]), end_row(code[(2, "baseline", 0.0)])
    assert one["steps"] == two["steps"] == 3000
    text = said("text.md")
    assert (f"Held-out bits per byte at step 3,000: {one['bits_per_byte']:.3f} (one key-sheared layer) against "
            f"{two['bits_per_byte']:.3f} (two plain layers); ICL score {_minus(one['icl_score'], 2)} against "
            f"{_minus(two['icl_score'], 2)}") in text
    assert f"with 43% more parameters ({two['parameters']:,} against {one['parameters']:,})" in text
    assert round(two["parameters"] / one["parameters"] - 1, 2) == 0.43
    revisions = {revision("text_corpora", r) for r in code.values()}
    assert len(revisions) == 1 and f"trained on 2026-12-07 at git {revisions.pop()} " in text
    assert f"({one['minutes']:.0f} and {two['minutes']:.0f} minutes, sharing the two cores)" in text


def test_the_prose_section_of_the_text_page_is_what_the_saved_text_corpora_runs_give():
    """docs/text.md's prose figures had only their commands and a date (2026-11-30); now the table and every figure
    around it are rebuilt from text_corpora's saved austen runs. Those runs changed two of the figures: the two plain
    layers' second copy came 0.04 nats below the first at step 1,000 (the page said within 0.02), and their held-out
    loss is lowest at step 3,250 (the page said it stops improving at step 2,750)."""
    results = saved("text_corpora")
    prose = {model_key(r): r for r in results.values() if r["config"]["task"]["corpus"] == "austen"}
    assert set(prose) == {(1, "key_only", 1.0), (2, "baseline", 0.0)}
    page = (ROOT / "docs" / "text.md").read_text()
    for line in curve_table(results, "austen"):
        assert line in page, line
    one, two = end_row(prose[(1, "key_only", 1.0)]), end_row(prose[(2, "baseline", 0.0)])
    assert (one["steps"], two["steps"]) == (6250, 4500)
    text = said("text.md")
    assert (f"the second copy's loss is never more than {one['largest_copy_gain']:.2f} nats (one key-sheared layer) or "
            f"{two['largest_copy_gain']:.2f} nats (two plain layers, at step {two['largest_copy_gain_step']:,}) below the "
            "first's, and no head's induction score exceeds 0.006") in text
    assert max(one["largest_induction_score"], two["largest_induction_score"]) <= 0.006
    for r in prose.values():  # nor is the second copy ever much harder: the gain stays near zero
        assert min(copy_gain(row) for row in r["history"] if row["step"] > 0) > -0.05
    assert (f"Held-out bits per byte at the end: {one['bits_per_byte']:.3f} (one key-sheared layer, step 6,250) against "
            f"{two['bits_per_byte']:.3f} (two plain layers, step 4,500); ICL score {one['icl_score']:.2f} against "
            f"{_minus(two['icl_score'], 2)}") in text
    assert (f"the two-layer model's held-out loss is lowest at step {two['lowest_loss_step']:,}, the one-layer model's "
            f"at step {one['lowest_loss_step']:,})") in text
    revisions = {revision("text_corpora", r) for r in prose.values()}
    assert len(revisions) == 1 and f"trained at git {revisions.pop()} between 2026-12-07 and 2026-12-08" in text
    assert f"one thread each, {one['minutes']:.0f} and {two['minutes']:.0f} minutes of training" in text


def test_text_corpora_trains_what_the_text_pages_commands_train():
    """``psattn sweep text_corpora`` is said to train the runs of docs/text.md's quoted prose commands, and the code
    runs are "the same commands with task.corpus=python-stdlib and 3,000 steps": each run's model, task and training
    recipe is its command's (the study adds a name and a checkpoint at every evaluation, and its quick plan names the
    CPU, which ``auto`` picks on a machine without a GPU)."""
    import re
    import shlex
    from dataclasses import replace

    from psattn.training.config import RunConfig, apply_overrides

    page = (ROOT / "docs" / "text.md").read_text()
    commands = re.findall(r"^psattn train --run-dir runs/austen-\S+ --set (.*)$", page, flags=re.MULTILINE)
    quoted = [apply_overrides(RunConfig(), shlex.split(command)) for command in commands]
    code = [replace(c, task=replace(c.task, corpus="python-stdlib"), train=replace(c.train, steps=3000)) for c in quoted]
    studied = {(c.task.corpus, c.model.n_layers): c for c in STUDIES["text_corpora"].plan("quick")}
    assert len(studied) == 4
    for command in quoted + code:
        run = studied[(command.task.corpus, command.model.n_layers)]
        assert run.model == command.model and run.task == command.task
        same = dict(checkpoint_every=command.train.checkpoint_every, threshold=command.train.threshold, device="auto")
        assert run.train.device == "cpu" and replace(run.train, **same) == command.train
