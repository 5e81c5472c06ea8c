"""The GPU sweeps: declared as the issue asks, run end to end at tiny size on the CPU (train, summarise,
pack, unpack, restore, table), cut by a time limit and resumed; the docs page and README rows are what
docs/results/gpu gives."""

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from psattn.cli import main as psattn
from psattn.experiments import at_scale, saved_runs
from psattn.experiments.declared import STUDIES
from psattn.experiments.studies import paper_scale
from psattn.models.presets import preset_parameter_count
from psattn.training.run_dir import load_result, run_files

ROOT = Path(__file__).resolve().parents[2]
#: what a GPU machine lacks that the CPU test environment has: the GPU path must not import them
ABSENT_ON_GPU = ("matplotlib", "scipy", "transformers", "onnx", "onnxruntime", "ray", "tensorboard", "psutil")


def test_paper_scale_declares_the_issues_grid_at_the_papers_settings():
    configs = paper_scale.paper_scale("full")
    assert len({c.name for c in configs}) == len(configs) == 2 * 3 * (1 + 2 * 4 + 5)
    full = {(c.model.attention.variant, c.model.attention.gamma) for c in configs if c.task.form == "all_positions"}
    assert full == {("baseline", 0.0)} | {(v, g) for v in ("symmetric", "key_only") for g in (0.2, 0.4, 0.8, 1.6)}
    single = {(c.model.attention.variant, c.model.attention.gamma) for c in configs if c.task.form == "single"}
    assert single == {("baseline", 0.0)} | {(v, g) for v in ("symmetric", "key_only") for g in (0.8, 1.0)}
    assert {c.train.seed for c in configs} == {0, 1, 2}
    for c in configs:
        t = c.train
        assert (t.precision, t.eval_every, t.lr, t.batch_size, t.device) == ("bf16", 25, 3e-4, 64, "cuda")
        assert t.steps >= 3000 and t.early_stop and t.early_stop_evals == 2 and t.threshold == 0.8
    sizes = {preset_parameter_count(c.model) for c in configs}
    assert sizes == {85_068_288, 15_785_472}  # psa-92m and psa-20m at the task's vocabulary of 64
    # the paper's table first (the plain model and the symmetric shear at 0.8, every seed): a first piece gives it
    assert [c.name for c in configs[:7]] == [f"paper_scale-induction-psa-92m-{row}-stop2-e25-s{seed}" for seed in (0, 1, 2)
                                             for row in ("baseline", "symmetric-g0.8")] + \
        ["paper_scale-induction-psa-92m-symmetric-g0.2-stop2-e25-s0"]
    assert all(c.model.n_layers == 12 for c in configs[:42]) and all(c.model.n_layers == 5 for c in configs[42:])
    assert "paper_scale" in STUDIES
    low, high = paper_scale.expected_minutes()
    assert 60 < low < high < 150  # the page's estimate, from the measured 50-90 ms a step


def fake(size, form, variant, gamma, seed, step):
    name = f"paper_scale-induction{'' if form == 'all_positions' else '-' + form}-{size}-{variant}-g{gamma:g}-s{seed}"
    config = {"name": name, "model": {"attention": {"variant": variant, "gamma": gamma, "placement": "post_rope"}},
              "task": {"name": "induction", "form": form}, "train": {"seed": seed, "steps": 3000, "threshold": 0.8}}
    return name, {"config": config, "emergence_step": step, "best_accuracy": 0.85 if step else 0.3, "history": [{}]}


def test_the_table_and_verdict_put_every_seed_beside_the_papers_table():
    results = dict([fake("psa-92m", "all_positions", "baseline", 0.0, s, step) for s, step in ((0, 1400), (1, None), (2, 1450))]
                   + [fake("psa-92m", "all_positions", "symmetric", 0.8, s, 100) for s in (0, 1, 2)]
                   + [fake("psa-20m", "all_positions", "symmetric", 0.8, 0, 75)])
    rows = paper_scale.scale_table(results)
    assert [(r["size"], r["variant"]) for r in rows] == [("psa-92m", "baseline"), ("psa-92m", "symmetric"),
                                                         ("psa-20m", "symmetric")]
    lines = paper_scale.format_scale_table(rows)
    assert lines[2] == "| psa-92m | all_positions | baseline | 0 | 1,400, —, 1,450 | 2/3 | 1,425 | 0.667 | 2/3 at ~2,700 |"
    assert lines[3] == "| psa-92m | all_positions | symmetric | 0.8 | 100, 100, 100 | 3/3 | 100 | 0.850 | 3/3 at ~717 |"
    assert lines[4].endswith("| 75 | 0.850 | — |")
    verdict = paper_scale.scale_verdict(rows)
    assert len(verdict) == 1 and "14.2× earlier (1,425 against 100 steps" in verdict[0] and "3.8× earlier" in verdict[0]


def test_a_diverged_seed_is_named_in_the_table_and_the_verdict():
    results = dict([fake("psa-92m", "all_positions", "baseline", 0.0, s, None) for s in (0, 1)]
                   + [fake("psa-92m", "all_positions", "symmetric", 0.8, s, 100) for s in (0, 1)])
    results[next(n for n in results if "symmetric" in n and n.endswith("1"))] |= {"diverged_at": 1234, "emergence_step": None}
    rows = paper_scale.scale_table(results)
    assert paper_scale.format_scale_table(rows)[3].startswith(
        "| psa-92m | all_positions | symmetric | 0.8 | 100, diverged at 1,234 |")
    assert "(diverged: all_positions symmetric γ=0.8 on 1 seed)" in paper_scale.scale_verdict(rows)[0]


def test_a_diverged_seed_is_named_in_the_readmes_glance_row(tmp_path):
    """The glance row counts a seed whose loss stopped being finite apart: it is no failure to emerge."""
    runs = [fake("psa-92m", "all_positions", "baseline", 0.0, s, None) for s in (0, 1, 2)]
    runs += [fake("psa-92m", "all_positions", "symmetric", 0.8, s, 100) for s in (0, 1, 2)]
    runs[-1][1].update(diverged_at=1234, emergence_step=None)
    (tmp_path / "paper_scale").mkdir()
    for name, result in runs:
        json.dump({"format": saved_runs.FORMAT, "name": name, "config": result["config"], "history": [],
                   "result": {k: v for k, v in result.items() if k not in ("config", "history")}},
                  (tmp_path / "paper_scale" / f"{name}.json").open("w"))
    [row] = at_scale.glance_rows(tmp_path)
    assert "γ = 0.8 2/3 at ~100 (1 diverged); γ = 0 0/3 at —" in row, row


def test_a_run_summary_saved_with_the_old_form_spelling_tables_as_all_positions(tmp_path):
    """A GPU piece packed before the form was spelled all_positions still lands in its row."""
    for seed in (0, 1, 2):
        name, result = fake("psa-92m", "full", "symmetric", 0.8, seed, 100)
        json.dump({"format": saved_runs.FORMAT, "name": name, "config": result["config"], "history": [],
                   "result": {k: v for k, v in result.items() if k not in ("config", "history")}},
                  (tmp_path / f"{name}.json").open("w"))
    rows = paper_scale.scale_table(saved_runs.load_summaries(tmp_path))
    assert [(r["form"], r["successes"]) for r in rows] == [("all_positions", 3)]
    assert paper_scale.paper_cell(rows[0]) == "3/3 at ~717"


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """The tiny paper_scale sweep, cut by a time limit at once, then resumed to the end: (runs folder, what
    the cut left in the first run's directory, both commands' output)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("tiny") / "runs"
    first = out / paper_scale.paper_scale("quick")[0].name

    def sweep(limit):
        with contextlib.redirect_stdout(io.StringIO()) as text:
            assert psattn(["sweep", "paper_scale", "--quick", "--out", str(out), "--time-limit", limit, "-q"]) == 0
        return text.getvalue()

    for limit in ("0.01", "0.05", "0.2"):  # a busy machine can spend the first limits before the first run starts
        stopped = sweep(limit)
        cut = {"checkpoint": (first / "checkpoint.pt").exists(), "result": (first / "result.json").exists()}
        if cut["checkpoint"] or cut["result"]:
            break
    return out, cut, [stopped, sweep("600")]


def test_a_summary_of_another_format_says_which_not_that_nothing_is_missing(tmp_path):
    """It said "is not a psattn run summary of format 1 (missing [])"."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"format": 2, "name": "run", "config": {}, "result": {}, "history": []}))
    with pytest.raises(ValueError, match=r"is a run summary of format 2, and this psattn reads format 1: read it with"):
        saved_runs.read_summary(path)


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "", 7])
def test_a_summary_whose_name_is_not_a_folder_name_is_refused_not_restored_elsewhere(tmp_path, name):
    """restore() wrote a summary named '../outside' beside the runs folder."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"format": saved_runs.FORMAT, "name": name, "config": {}, "result": {}, "history": []}))
    with pytest.raises(ValueError, match="is not a plain folder name"):
        saved_runs.restore(path, tmp_path / "runs" / "deep")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run.json"]


def test_a_summary_is_small_restores_as_a_finished_run_and_travels_in_an_archive(tiny_sweep, tmp_path):
    config = paper_scale.paper_scale("quick")[1]
    run_dir = tiny_sweep[0] / config.name
    path = saved_runs.write_summary(run_dir, tmp_path / "summaries")
    summary = json.loads(path.read_text())
    history = load_result(run_dir)["history"]
    assert summary["device"] == "cpu" and summary["meta"]["seed"] == 0 and summary["corpus"] is None
    assert summary["history"][0]["induction_score"] == [[max(layer)] for layer in history[0]["induction_score"]]
    assert summary["history"][-1] == history[-1]  # the last evaluation keeps every head
    assert saved_runs.restore(path, tmp_path / "fresh") and not saved_runs.restore(path, tmp_path / "fresh")
    restored = load_result(tmp_path / "fresh" / config.name)
    assert restored["emergence_step"] == summary["result"]["emergence_step"] and restored["config"] == summary["config"]
    archive = saved_runs.pack([path], tmp_path / "piece.tar.gz", "paper_scale")
    assert [p.relative_to(tmp_path / "docs") for p in saved_runs.unpack(archive, tmp_path / "docs")] == [
        Path("paper_scale") / path.name]
    assert saved_runs.load_summaries(tmp_path / "docs" / "paper_scale")[config.name]["config"] == summary["config"]
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(path, arcname="../escape.json")
    with pytest.raises(ValueError, match="not a run summary"):
        saved_runs.unpack(bad, tmp_path / "docs")
    assert not (tmp_path / "escape.json").exists()


def test_a_pack_killed_midway_leaves_the_earlier_archive_whole(tmp_path):
    """pack wrote its archive in place: a kill midway left a truncated archive where a whole one was."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"format": 1, "pad": "x" * 100_000}))
    second.write_text(json.dumps({"format": 1}))
    archive = saved_runs.pack([first, second], tmp_path / "piece.tar.gz", "runs")
    kill = ("import os, pathlib; from psattn.experiments import saved_runs; read = pathlib.Path.read_bytes\n"
            "pathlib.Path.read_bytes = lambda p: os._exit(137) if p.name == 'b.json' else read(p)\n"
            f"saved_runs.pack([pathlib.Path({str(first)!r}), pathlib.Path({str(second)!r})], {str(archive)!r}, 'runs')")
    assert subprocess.run([sys.executable, "-c", kill]).returncode == 137
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["runs/a.json", "runs/b.json"]


def test_a_time_limit_stops_the_sweep_cleanly_and_the_same_command_resumes(tiny_sweep):
    out, cut, (stopped, resumed) = tiny_sweep
    assert "time limit reached: 0 of 16 runs finished" in stopped
    assert cut == {"checkpoint": True, "result": False}
    assert "time limit" not in resumed and "| model | form | variant |" in resumed
    assert all(load_result(out / c.name) for c in paper_scale.paper_scale("quick"))


@pytest.mark.slow
def test_the_gpu_driver_smoke_runs_end_to_end_without_what_a_gpu_machine_lacks(tmp_path):
    """benchmarks/gpu_sweeps.sh --smoke, with the libraries a GPU machine lacks made unimportable; then a
    second piece on a fresh machine restores the saved runs and trains none."""
    env = blocked_env(tmp_path, ABSENT_ON_GPU)
    done = subprocess.run(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "paper_scale"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "16 newly finished runs packed" in done.stdout and "unpacked 16 run summaries" in done.stdout
    saved = tmp_path / "out" / "results" / "paper_scale"
    assert len(list(saved.glob("*.json"))) == 16
    assert "| model | form | variant | gamma | emergence step per seed | succeed | mean emergence step | mean best " \
           "accuracy | paper (91.3M) |" in at_scale.section("paper_scale", saved, "quick")
    again = subprocess.run(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "paper_scale", "--runs",
                            str(tmp_path / "fresh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "16 restored" in again.stdout and "0 newly finished runs packed" in again.stdout


def test_a_quick_plan_section_with_no_saved_run_counts_the_quick_plan(tmp_path):
    """A smoke piece that saved no run printed the full plan's "its 18 runs need a GPU, about 57–103 minutes" after
    its own "6 runs declared"."""
    assert at_scale.section("text_scale", tmp_path, "quick") == [
        "No `text_scale` run of the quick plan has been saved: its 6 runs have not run."]
    assert "its 18 runs need a GPU" in at_scale.section("text_scale", tmp_path)[0]


def test_the_at_scale_page_and_the_readme_say_what_docs_results_gpu_holds():
    page = (ROOT / "docs" / "at_scale.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert at_scale.render_page(page, ROOT / "docs" / "results" / "gpu") == page, "python benchmarks/gpu_sweeps.py page"
    for experiment in at_scale.GPU_SWEEPS:
        lines = at_scale.section(experiment, ROOT / "docs" / "results" / "gpu" / experiment)
        assert all(line in page for line in lines), "\n".join(lines)
    assert all(row in readme for row in at_scale.glance_rows(ROOT / "docs" / "results" / "gpu"))
    assert "at_scale.md" in (ROOT / "mkdocs.yml").read_text()


def test_saved_runs_fill_the_page_status_sections_figures_and_glance_rows(tiny_sweep, tmp_path):
    out = tiny_sweep[0]
    configs = paper_scale.paper_scale("quick")
    for c in configs[:5]:
        saved_runs.write_summary(out / c.name, tmp_path / "gpu" / "paper_scale")
    page = at_scale.render_page((ROOT / "docs" / "at_scale.md").read_text(), tmp_path / "gpu")
    assert "| psa-92m and psa-20m on induction, the paper's γ grid, 3 seeds | 5 of 84 runs |" in page
    assert "![paper_scale](figures/paper_scale.png)" in page and "| L2d16h2 | single | baseline | 0 | — | 0/1 |" in page
    assert "5 of the 84 declared runs have run; the rest have not." in page and "No `text_scale` run has been saved" in page
    assert at_scale.glance_rows(tmp_path / "gpu") == []  # tiny models: no psa-92m row
    with pytest.raises(ValueError, match="no block <!-- results: status -->"):
        at_scale.render_page("# a page without markers", tmp_path / "gpu")
    pytest.importorskip("matplotlib")
    drawn = at_scale.figures(tmp_path / "gpu", tmp_path / "figures")
    assert [p.name for p in drawn] == ["paper_scale.png"] and drawn[0].read_bytes()[:4] == b"\x89PNG"


def test_a_copy_without_git_records_the_revision_it_is_given(monkeypatch):
    import psattn.provenance as provenance

    def no_git(*args, **kwargs):
        raise OSError("git: not found")
    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    monkeypatch.delenv("PSATTN_GIT_REVISION", raising=False)
    assert provenance.git_revision() is None
    monkeypatch.setenv("PSATTN_GIT_REVISION", "4f3c995")
    assert provenance.provenance(0)["git_revision"] == "4f3c995"


def test_a_revision_given_by_name_wins_over_a_stale_git_in_the_copy(monkeypatch):
    import psattn.provenance as provenance

    monkeypatch.delenv("PSATTN_GIT_REVISION", raising=False)
    found = provenance.git_revision()  # this checkout's HEAD, or None outside git
    monkeypatch.setenv("PSATTN_GIT_REVISION", "3f4a68c")
    assert provenance.git_revision() == "3f4a68c" != found


def driver():
    """benchmarks/gpu_sweeps.py, imported as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    return gpu_sweeps


@pytest.mark.parametrize("cut", ["a stop", "a full disk"])
def test_page_cut_short_leaves_the_page_and_its_figures_as_they_were(tmp_path, monkeypatch, cut):
    """gpu_sweeps page rewrote the page in place, then drew the figures one after the other: a full disk cut the page
    short, and a stop while the figures were drawn left the new page beside the earlier figures. Now the figures are
    drawn into a staging folder and moved in with the page, the stop signals held."""
    from helpers import file_size_limit

    page = tmp_path / "docs" / "at_scale.md"
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    page.write_text((ROOT / "docs" / "at_scale.md").read_text().replace("not run yet", "an earlier status"))
    (tmp_path / "docs" / "figures" / "paper_scale.png").write_text("the earlier figure")

    def files():
        return {str(p.relative_to(tmp_path)): p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    def figures(results, out_dir):
        (out_dir / "paper_scale.png").write_text("the new figure " * 100)
        if cut == "a stop":
            raise KeyboardInterrupt
        return [out_dir / "paper_scale.png"]

    before = files()
    monkeypatch.setattr(at_scale, "figures", figures)
    argv = ["page", "--page", str(page), "--results", str(tmp_path / "no_results")]  # the status: not run yet
    if cut == "a stop":
        with pytest.raises(KeyboardInterrupt):
            driver().main(argv)
    else:
        with file_size_limit(1000), pytest.raises(OSError, match="File too large"):
            driver().main(argv)
    assert files() == before
    assert [p.name for p in (tmp_path / "docs" / "figures").iterdir()] == ["paper_scale.png"]  # no staging folder
    monkeypatch.undo()
    monkeypatch.setattr(at_scale, "figures", lambda results, out_dir: [])
    assert driver().main(argv) == 0 and "not run yet" in page.read_text()


def blocked_env(tmp_path, names):
    """An environment whose Python cannot import ``names`` (None in sys.modules), as on a GPU machine."""
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({tuple(names)!r}))\n")
    return {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "PYTHONPATH": str(blocker)}


def test_the_driver_refuses_a_text_sweep_without_tokenizers_and_says_how_to_carry_it(tmp_path):
    done = subprocess.run(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "text_scale"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=blocked_env(tmp_path, ("tokenizers",)))
    assert done.returncode == 1 and "lacks tokenizers" in done.stderr and ".gpu-deps" in done.stderr


@pytest.mark.slow
def test_the_gpu_driver_runs_the_text_sweep_end_to_end_and_reports_its_corpus(tmp_path):
    pytest.importorskip("tokenizers")
    env = {**blocked_env(tmp_path, ABSENT_ON_GPU), "PSATTN_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "text_scale"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "corpus: " in done.stdout and "the largest budget reads it" in done.stdout
    assert re.search(r"held-out, tokenized or opened in \d+ s;", done.stdout)  # a fresh machine's build time, measured
    assert "6 newly finished runs packed" in done.stdout and "The pilot" in done.stdout
    back = list((tmp_path / "out").glob("tokenizer-*.json"))  # trained here: handed back, and kept by the smoke unpack
    assert len(back) == 1 and f"its BPE tokenizer comes back as {back[0].name}" in done.stdout
    assert "(its tokenizer loaded, not trained)" not in done.stdout
    env["PSATTN_CACHE"] = str(tmp_path / "next-machine-cache")  # the next piece, on a fresh machine
    again = subprocess.run(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "text_scale"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(its tokenizer loaded, not trained)" in again.stdout and "comes back as" not in again.stdout
    first, second = (json.loads((tmp_path / cache / "text" / back[0].stem.removeprefix("tokenizer-") / "meta.json")
                                .read_text()) for cache in ("cache", "next-machine-cache"))
    assert first == second  # the same tokens, checksums and tokenizer


def test_unpack_keeps_a_pieces_bpe_tokenizer_where_the_next_pieces_load_it_and_refuses_another_kind(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    from psattn.textdata.tokenizer import BPETokenizer, ByteTokenizer

    gpu_sweeps = driver()
    bpe, byte = tmp_path / "tokenizer-abc-bpe300-0.05-byfile.json", tmp_path / "tokenizer-def-byte-0.05.json"
    bpe.write_text(BPETokenizer.train(["def f(x):\n    return x\n" * 40], 300).to_json())
    byte.write_text(ByteTokenizer().to_json())
    assert gpu_sweeps.main(["unpack", str(bpe), str(byte), "--into", str(tmp_path / "gpu")]) == 1
    out, err = capsys.readouterr()
    assert (tmp_path / "gpu" / "tokenizers" / "abc-bpe300-0.05-byfile.json").read_text() == bpe.read_text()
    assert "kept the BPE tokenizer" in out and f"{byte} is not a BPE tokenizer" in err
    assert not (tmp_path / "gpu" / "tokenizers" / "def-byte-0.05.json").exists()


def test_a_tokenizer_kept_on_a_full_disk_leaves_the_one_already_there_whole(tmp_path):
    """keep_tokenizer copied the piece's tokenizer in place: a copy cut short (a full disk, a Ctrl-C during unpack) left
    a truncated tokenizer where the next pieces load it, which they then refused as not JSON."""
    pytest.importorskip("tokenizers")
    from helpers import file_size_limit
    from psattn.textdata.tokenizer import BPETokenizer, load_tokenizer

    gpu_sweeps = driver()
    back = tmp_path / "piece" / "tokenizer-abc-bpe300-0.05.json"
    back.parent.mkdir()
    back.write_text(BPETokenizer.train(["def f(x):\n    return x\n" * 40, "the quick brown fox " * 40], 300).to_json())
    kept = gpu_sweeps.keep_tokenizer(back, tmp_path / "gpu")
    assert kept.stat().st_size > 4096
    with file_size_limit(4096), pytest.raises(OSError):
        gpu_sweeps.keep_tokenizer(back, tmp_path / "gpu")  # the same piece unpacked again
    assert kept.read_bytes() == back.read_bytes() and load_tokenizer(kept).kind == "bpe"


def test_the_driver_unpacks_a_piece_and_counts_what_is_left(tiny_sweep, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    name = paper_scale.paper_scale("quick")[0].name
    summary = saved_runs.write_summary(tiny_sweep[0] / name, tmp_path / "staging")
    archive = saved_runs.pack([summary], tmp_path / "paper_scale.tar.gz", "paper_scale")
    assert gpu_sweeps.main(["unpack", str(archive), "--into", str(tmp_path / "gpu")]) == 0
    assert gpu_sweeps.main(["status", "paper_scale", "--results", str(tmp_path / "gpu")]) == 0
    out = capsys.readouterr().out
    assert "unpacked 1 run summaries" in out and "paper_scale: 0 of 84 declared runs saved" in out  # a tiny run
    assert f"  left: {paper_scale.paper_scale('full')[0].name}" in out


def test_a_piece_whose_sweep_fails_still_packs_the_runs_it_finished(tiny_sweep, tmp_path, monkeypatch):
    """A diverged run, an error or a SIGTERM ends the sweep with a non-zero code: the runs finished
    before it still come back in the archive."""
    import importlib.util
    import shutil

    import psattn.cli

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    runs = tmp_path / "out" / "runs" / "paper_scale"
    finished = [c.name for c in paper_scale.paper_scale("quick")[:2]]
    for name in finished:
        shutil.copytree(tiny_sweep[0] / name, runs / name)
    monkeypatch.setattr(psattn.cli, "main", lambda argv: 1)  # the sweep stops, as a diverged run stops it
    assert gpu_sweeps.main(["run", "paper_scale", "--smoke", "--out", str(tmp_path / "out")]) == 1
    packed = saved_runs.unpack(tmp_path / "out" / "paper_scale.tar.gz", tmp_path / "docs")
    assert sorted(p.stem for p in packed) == sorted(finished)


def test_a_run_in_progress_travels_in_parts_and_resumes_exactly_on_another_machine(tiny_sweep, tmp_path):
    """A piece cut by its time limit hands back its run in progress in parts; joined here and carried to
    a fresh machine, the run resumes where it stopped and ends as the uninterrupted sweep's did."""
    import contextlib
    import importlib.util
    import io

    from psattn.experiments import run_parts

    machine_a = tmp_path / "a" / "paper_scale"
    with contextlib.redirect_stdout(io.StringIO()):
        assert psattn(["sweep", "paper_scale", "--quick", "--out", str(machine_a), "--time-limit", "0.01", "-q"]) == 0
    first = paper_scale.paper_scale("quick")[0].name
    assert (machine_a / first / "checkpoint.pt").exists() and load_result(machine_a / first) is None
    parts = run_parts.split_run(machine_a / first, tmp_path / "out", "paper_scale-in-progress", part_bytes=64 * 1024,
                                max_parts=50)
    assert len(parts) > 1 and all(run_parts.is_part(p) and p.stat().st_size <= 64 * 1024 for p in parts)
    with pytest.raises(ValueError, match=r"part 01 of \d\d is missing"):
        run_parts.join_run(parts[:1] + parts[2:], tmp_path / "b")
    assert not (tmp_path / "b").exists()
    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert gpu_sweeps.main(["unpack", *map(str, reversed(parts)), "--runs", str(tmp_path / "b")]) == 0
    machine_b = tmp_path / "b" / "paper_scale"
    run_dir = machine_b / first
    assert f"joined {len(parts)} parts into {run_dir} (step " in said.getvalue()
    for path in (machine_a / first).iterdir():
        if path.name in {p.name for p in run_files(path.parent)}:
            assert (run_dir / path.name).read_bytes() == path.read_bytes(), path.name
    with contextlib.redirect_stdout(io.StringIO()):
        assert psattn(["sweep", "paper_scale", "--quick", "--out", str(machine_b), "--time-limit", "600", "-q"]) == 0
    resumed, whole = load_result(run_dir), load_result(tiny_sweep[0] / first)
    assert [(r["step"], r["eval_accuracy"], r["train_loss"]) for r in resumed["history"]] == \
           [(r["step"], r["eval_accuracy"], r["train_loss"]) for r in whole["history"]]
    assert run_parts.split_run(machine_a / first, tmp_path / "small", "x", part_bytes=1024, max_parts=2) == []
    assert not (tmp_path / "small").exists()


def test_joining_refuses_an_archive_that_is_not_one_run_directory(tmp_path):
    from psattn.experiments import run_parts

    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "evil.sh").write_text("echo")
    with tarfile.open(tmp_path / "x.tar", "w") as tar:
        tar.add(stray / "evil.sh", arcname="run/../evil.sh")
    part = tmp_path / "x.tar.00-of-01"
    (tmp_path / "x.tar").rename(part)
    with pytest.raises(ValueError, match="is not a file of a run directory"):
        run_parts.join_run([part], tmp_path / "runs")
    (stray / "config.json").write_text("{}")
    with tarfile.open(tmp_path / "y.tar.00-of-01", "w") as tar:
        tar.add(stray / "config.json", arcname="../config.json")  # a run folder named ".." writes beside runs/
    with pytest.raises(ValueError, match="is not a file of a run directory"):
        run_parts.join_run([tmp_path / "y.tar.00-of-01"], tmp_path / "runs")
    with pytest.raises(ValueError, match="not named as a part"):
        run_parts.join_run([tmp_path / "stray" / "evil.sh"], tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_piece_with_workers_trains_runs_side_by_side_and_ends_as_the_same_runs_in_order(tmp_path):
    """``--workers 2`` under a time limit: two worker processes take the runs in order; the results are
    those of the same runs trained one after another in this process."""
    configs = paper_scale.paper_scale("quick")[:3]
    from psattn.experiments.sweep import run_within

    side_by_side, left = run_within(configs, tmp_path / "two", 600, progress=False, workers=2)
    in_order, _ = run_within(configs, tmp_path / "one", 600, progress=False)
    assert left == [] and set(side_by_side) == {c.name for c in configs}
    for name, result in in_order.items():
        assert side_by_side[name]["emergence_step"] == result["emergence_step"]
        for key in ("train_loss", "eval_loss", "eval_accuracy"):  # the first train_loss is None (no step yet)
            def values(history, key=key):
                return [float("nan") if h[key] is None else h[key] for h in history]
            assert values(side_by_side[name]["history"]) == pytest.approx(values(result["history"]), rel=1e-4,
                                                                          nan_ok=True), key
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        run_within(configs, tmp_path / "two", 600, workers=0)


def test_a_worker_stops_its_run_at_the_pieces_deadline_and_starts_none_after_it(tmp_path, monkeypatch):
    import time

    from psattn.experiments import sweep
    from psattn.training import loss as loss_module

    config = paper_scale.paper_scale("quick")[0]
    run_dir = tmp_path / config.name
    assert sweep._run_one(config.to_dict(), str(run_dir), deadline=time.monotonic() - 1) is None
    assert not run_dir.exists()  # the piece's time was up: not started
    assert sweep._run_one(config.to_dict(), str(run_dir), deadline=time.monotonic() + 0.01) is None
    assert (run_dir / "checkpoint.pt").exists() and load_result(run_dir) is None  # cut, checkpointed
    assert sweep._run_one(config.to_dict(), str(run_dir), deadline=time.monotonic() + 600) is None
    assert load_result(run_dir) is not None  # resumed to the end

    real_loss = loss_module.shard_loss
    monkeypatch.setattr(loss_module, "shard_loss", lambda *a: real_loss(*a) * float("nan"))
    other = paper_scale.paper_scale("quick")[1]
    message = sweep._run_one(other.to_dict(), str(tmp_path / other.name), deadline=time.monotonic() + 600)
    assert message is not None and "loss became nan at step 0" in message  # an outcome, not an error


def test_a_piece_hands_back_no_more_in_progress_parts_than_the_machine_returns(tmp_path, capsys):
    """Each run left in progress comes back in parts only while the piece's files stay within the 8
    files and 64 MiB a GPU machine hands back (one file kept for a log)."""
    import time

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_sweeps

    from psattn.experiments import run_parts, sweep

    configs = paper_scale.paper_scale("quick")[:4]
    runs = tmp_path / "runs"
    for config in configs:  # four runs cut short, as four workers leave them
        sweep._run_one(config.to_dict(), str(runs / config.name), deadline=time.monotonic() + 0.01)
    sweep._run_one(configs[-1].to_dict(), str(runs / configs[-1].name), deadline=time.monotonic() + 0.01)  # one step on
    out = tmp_path / "out"
    out.mkdir()
    for name in ("paper_scale.tar.gz", "a.log", "b.log", "c.log"):
        (out / name).write_bytes(b"x")
    gpu_sweeps._split_in_progress(configs, runs, out, "paper_scale")
    parts = [p for p in out.iterdir() if run_parts.is_part(p)]
    assert len(parts) == 3 and len(list(out.iterdir())) == run_parts.FILES_BACK - 1
    printed = capsys.readouterr().out
    assert printed.count("the next machine starts it again") == 1
    assert f"{configs[-1].name} is in progress (step 2 of" in printed.splitlines()[0]  # the one furthest on first

    crowded = tmp_path / "crowded"
    crowded.mkdir()
    (crowded / "paper_scale.tar.gz").write_bytes(b"x" * (run_parts.BYTES_BACK - 2**20 - run_parts.PART_BYTES + 1))
    gpu_sweeps._split_in_progress(configs, runs, crowded, "paper_scale")
    assert list(crowded.iterdir()) == [crowded / "paper_scale.tar.gz"]  # no room left for a whole part
    assert capsys.readouterr().out.count("the next machine starts it again") == 4


def test_a_run_that_fails_in_a_worker_stops_the_others_before_its_error_is_raised(tmp_path):
    """One run failing (its directory is a file here) used to surface only after every queued run had
    trained, with the stop signals' handlers already gone; now the others checkpoint and stop, the
    queued ones never start, and the error is raised."""
    import dataclasses
    import time

    from psattn.experiments.sweep import run_within

    configs = [dataclasses.replace(c, train=dataclasses.replace(c.train, steps=100_000, early_stop=False))
               for c in paper_scale.paper_scale("quick")[:5]]
    out = tmp_path / "runs"
    out.mkdir()
    (out / configs[0].name).write_text("not a run directory")
    started = time.monotonic()
    with pytest.raises(OSError):
        run_within(configs, out, 600, progress=False, workers=2)
    assert time.monotonic() - started < 120  # not after 100,000 steps of each run
    assert not any(load_result(out / c.name) for c in configs[1:])
    assert not (out / configs[4].name).exists()  # queued behind the others: never started


def test_workers_whose_runs_could_not_fit_side_by_side_are_refused_before_any_starts(tmp_path, monkeypatch):
    from psattn.experiments.sweep import run_within
    from psattn.training import memory

    configs = paper_scale.paper_scale("quick")[:3]
    largest = max(memory.estimate(c).total_bytes for c in configs)
    monkeypatch.setattr(memory, "available_bytes", lambda device: int(1.5 * largest / memory.MARGIN))
    with pytest.raises(ValueError, match="2 of these runs side by side need about .* use fewer workers"):
        run_within(configs, tmp_path, 600, progress=False, workers=2)
    assert list(tmp_path.iterdir()) == []  # nothing started
    memory.check_side_by_side(configs, 1)  # one at a time fits


@pytest.mark.slow
def test_a_sigterm_to_the_gpu_driver_returns_only_once_the_piece_has_packed_its_runs(tmp_path):
    """`timeout N benchmarks/gpu_sweeps.sh ...` sends SIGTERM to the script: the piece it runs gets it, checkpoints,
    packs what it finished, and the script returns after that, leaving no process behind (the machine hands back
    $OUT when the command returns)."""
    import signal
    import time

    env = blocked_env(tmp_path, ABSENT_ON_GPU)
    proc = subprocess.Popen(["bash", "benchmarks/gpu_sweeps.sh", "--smoke", "paper_scale", "--time-limit", "600"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = tmp_path / "out" / "runs" / "paper_scale"
    start = time.monotonic()
    while not (runs.is_dir() and any(runs.glob("*/metrics.jsonl"))) and time.monotonic() - start < 120:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert (tmp_path / "out" / "paper_scale.tar.gz").exists(), (proc.returncode, out[-2000:], err[-3000:])  # packed first
    assert "newly finished runs packed" in out and proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    left = subprocess.run(["pgrep", "-f", f"--out {tmp_path / 'out'}"], capture_output=True, text=True).stdout.split()
    assert not left  # the piece ended with the script


@pytest.mark.slow
def test_a_sigterm_between_runs_still_packs_the_runs_the_piece_finished(tiny_sweep, tmp_path):
    """Outside a run's training no handler of psattn's own is installed: a SIGTERM there used to end the
    piece at once, with nothing packed."""
    import signal

    finished = [c.name for c in paper_scale.paper_scale("quick")[:2]]
    runs = tmp_path / "out" / "runs" / "paper_scale"
    script = tmp_path / "piece.py"
    script.write_text(f"""
import os, shutil, signal, sys, time
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import gpu_sweeps
import psattn.cli

def sweep(argv):  # two runs finish, then the signal comes between runs
    for name in {finished!r}:
        shutil.copytree(os.path.join({str(tiny_sweep[0])!r}, name), os.path.join({str(runs)!r}, name))
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    return 0

psattn.cli.main = sweep
sys.exit(gpu_sweeps.main(["run", "paper_scale", "--smoke", "--out", {str(tmp_path / "out")!r}]))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in done.stderr, done.stderr[-3000:]
    packed = saved_runs.unpack(tmp_path / "out" / "paper_scale.tar.gz", tmp_path / "docs")
    assert sorted(p.stem for p in packed) == sorted(finished)


@pytest.mark.slow
def test_a_sigterm_while_the_piece_packs_is_handled_once_the_pack_is_whole(tiny_sweep, tmp_path):
    """The pack held the stop signals back from the main thread alone; the kernel hands a signal to any thread
    that does not block it (tqdm's monitor, CUDA's), CPython then ran the handler in the main thread all the
    same, and the pack stopped halfway: nothing came back."""
    import signal

    finished = [c.name for c in paper_scale.paper_scale("quick")[:2]]
    runs = tmp_path / "out" / "runs" / "paper_scale"
    script = tmp_path / "piece.py"
    script.write_text(f"""
import os, shutil, signal, sys, threading, time
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import gpu_sweeps
import psattn.cli
import psattn.experiments.saved_runs as saved_runs

def sweep(argv):  # two runs finish
    for name in {finished!r}:
        shutil.copytree(os.path.join({str(tiny_sweep[0])!r}, name), os.path.join({str(runs)!r}, name))
    return 0

write_summary, sent = saved_runs.write_summary, []
def write_summary_signalled(*args, **kwargs):  # the lease's SIGTERM comes while the piece packs
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)
    return write_summary(*args, **kwargs)

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a thread that takes signals, as tqdm's monitor
psattn.cli.main = sweep
saved_runs.write_summary = write_summary_signalled
sys.exit(gpu_sweeps.main(["run", "paper_scale", "--smoke", "--out", {str(tmp_path / "out")!r}]))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in done.stderr, done.stderr[-3000:]
    assert "2 newly finished runs packed" in done.stdout, done.stdout[-3000:]
    packed = saved_runs.unpack(tmp_path / "out" / "paper_scale.tar.gz", tmp_path / "docs")
    assert sorted(p.stem for p in packed) == sorted(finished)


def test_an_older_pieces_run_in_progress_unpacked_late_does_not_rewind_the_run(tiny_sweep, tmp_path, capsys):
    """Parts of a run in progress from an older piece, unpacked after a later piece's, replaced the later checkpoint
    (the next piece trained those steps again), and brought back a finished run as one in progress."""
    import importlib.util
    import shutil

    import torch

    from psattn.experiments import run_parts

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    name = paper_scale.paper_scale("quick")[0].name
    older = tmp_path / "older" / name
    shutil.copytree(tiny_sweep[0] / name, older)
    (older / "result.json").unlink()  # a run in progress at the end of its last step
    parts = run_parts.split_run(older, tmp_path / "out", "paper_scale-in-progress")
    runs, into = tmp_path / "gpu_runs", tmp_path / "gpu"
    assert gpu_sweeps.main(["unpack", *map(str, parts), "--runs", str(runs), "--into", str(into)]) == 0
    checkpoint = runs / "paper_scale" / name / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=True)
    state["step"] += 5  # a later piece went on
    torch.save(state, checkpoint)
    later = checkpoint.read_bytes()
    assert gpu_sweeps.main(["unpack", *map(str, parts), "--runs", str(runs), "--into", str(into)]) == 0
    assert checkpoint.read_bytes() == later and f"holds step {state['step']} already" in capsys.readouterr().out
    checkpoint.unlink()
    (into / "paper_scale").mkdir(parents=True)
    saved_runs.write_summary(tiny_sweep[0] / name, into / "paper_scale")  # a later piece finished it
    assert gpu_sweeps.main(["unpack", *map(str, parts), "--runs", str(runs), "--into", str(into)]) == 0
    assert not checkpoint.exists() and f"{name} is finished" in capsys.readouterr().out


def test_the_provenance_sentence_shortens_a_revision_but_not_the_word_unrecorded():
    """A copy without .git or PSATTN_GIT_REVISION records no revision: the sentence said "at git unrecor"."""
    runs = {"a": {"device": "cpu", "meta": {"git_revision": None, "started": "2026-12-05T10:00:00"}},
            "b": {"device": "cpu", "meta": {"git_revision": "0123456789abcdef", "started": "2026-12-05T11:00:00"}}}
    assert "at git 0123456, unrecorded (torch" in at_scale._provenance(runs)


def test_two_pieces_parts_of_one_name_unpacked_together_do_not_mix(tiny_sweep, tmp_path, capsys):
    """Every piece names its parts paper_scale-in-progress.tar.NN-of-MM: given in one command, two pieces' parts
    were joined as one archive (the last of each index taken); each piece's folder is now its own, and the later
    step stays whatever the order."""
    import importlib.util
    import shutil

    import torch

    from psattn.experiments import run_parts

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    name = paper_scale.paper_scale("quick")[0].name
    pieces = []
    for piece, ahead in (("a", 0), ("b", 3)):
        run = tmp_path / piece / name
        shutil.copytree(tiny_sweep[0] / name, run)
        (run / "result.json").unlink()
        state = torch.load(run / "checkpoint.pt", weights_only=True)
        state["step"] += ahead
        torch.save(state, run / "checkpoint.pt")
        pieces.append(run_parts.split_run(run, tmp_path / f"out-{piece}", "paper_scale-in-progress", part_bytes=2**16,
                                          max_parts=50))
    assert [p.name for p in pieces[0]] == [p.name for p in pieces[1]] and len(pieces[0]) > 1
    with pytest.raises(ValueError, match="is given twice"):
        run_parts.join_run(pieces[0] + pieces[1], tmp_path / "x")
    runs = tmp_path / "gpu_runs"
    assert gpu_sweeps.main(["unpack", *map(str, pieces[1] + pieces[0]), "--runs", str(runs),
                            "--into", str(tmp_path / "gpu")]) == 0
    joined = runs / "paper_scale" / name / "checkpoint.pt"
    assert joined.read_bytes() == (tmp_path / "b" / name / "checkpoint.pt").read_bytes()
    assert "holds step" in capsys.readouterr().out


def test_unpack_names_a_file_it_cannot_read_in_one_line_and_unpacks_the_others(tiny_sweep, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    names = [c.name for c in paper_scale.paper_scale("quick")[:3]]
    summaries = [saved_runs.write_summary(tiny_sweep[0] / name, tmp_path / "s") for name in names]
    whole = saved_runs.pack(summaries, tmp_path / "a" / "paper_scale.tar.gz", "paper_scale")
    cut = tmp_path / "b" / "paper_scale.tar.gz"
    cut.parent.mkdir()
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # a copy cut short
    into = tmp_path / "gpu"
    assert gpu_sweeps.main(["unpack", str(cut), str(whole), "--into", str(into)]) == 1
    err = capsys.readouterr().err
    assert f"gpu_sweeps: error: {cut}: " in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert sorted(p.stem for p in (into / "paper_scale").iterdir()) == sorted(names)
    with pytest.raises(SystemExit):
        gpu_sweeps.main(["unpack", str(tmp_path / "a"), "--into", str(into)])  # a folder, not the files in it
    assert "is not a file" in capsys.readouterr().err


def test_a_smoke_pieces_archive_is_refused_by_the_committed_results_folder(tiny_sweep, tmp_path, monkeypatch, capsys):
    """`gpu_sweeps.sh --smoke` on the GPU machine hands back an archive named like a real piece's; unpacked into
    docs/results/gpu, its CPU runs filled the page's table and status ("16 of 84 runs") as the sweep's results."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    monkeypatch.setattr(gpu_sweeps, "RESULTS", tmp_path / "docs" / "results" / "gpu")  # the default --into
    name = paper_scale.paper_scale("quick")[0].name
    summary = saved_runs.write_summary(tiny_sweep[0] / name, tmp_path / "staging")
    archive = saved_runs.pack([summary], tmp_path / "paper_scale.tar.gz", "paper_scale")
    assert gpu_sweeps.main(["unpack", str(archive)]) == 1
    assert "no GPU sweep's full plan declares, such as " + name in capsys.readouterr().err
    assert not (tmp_path / "docs").exists()
    assert gpu_sweeps.main(["unpack", str(archive), "--into", str(tmp_path / "elsewhere")]) == 0  # a scratch folder


def test_unpacking_a_finished_run_deletes_the_checkpoint_an_earlier_piece_left_in_progress(tiny_sweep, tmp_path, capsys):
    """Its copy in gpu_runs (up to 45 MiB) was carried to every later piece, within the 64 MiB a command carries."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    done, going = (c.name for c in paper_scale.paper_scale("quick")[:2])
    runs = tmp_path / "gpu_runs"
    for name in (done, going):
        shutil.copytree(tiny_sweep[0] / name, runs / "paper_scale" / name)
        (runs / "paper_scale" / name / "result.json").unlink()  # joined from an earlier piece, in progress
    summary = saved_runs.write_summary(tiny_sweep[0] / done, tmp_path / "staging")
    archive = saved_runs.pack([summary], tmp_path / "paper_scale.tar.gz", "paper_scale")
    assert gpu_sweeps.main(["unpack", str(archive), "--into", str(tmp_path / "gpu"), "--runs", str(runs)]) == 0
    assert not (runs / "paper_scale" / done / "checkpoint.pt").exists() and f"{done} is finished" in capsys.readouterr().out
    assert (runs / "paper_scale" / going / "checkpoint.pt").exists()


def test_a_saved_runs_corpus_record_counts_the_documents_and_text_bytes_the_run_read(tmp_path, monkeypatch,
                                                                                    fresh_token_cache):
    # the page's "Corpus X: N files, M MB": it counted python-installed's non-UTF-8 files and the copies the split
    # by file drops (7 files for 5 documents here), and a .txt.gz's compressed size (109 bytes for 21,000 of text)
    import gzip
    import sysconfig

    stdlib, site = tmp_path / "lib", tmp_path / "lib" / "site-packages"
    (site / "pkg" / "_vendor").mkdir(parents=True)
    for path, text in (("os.py", "import sys\n"), ("pkg/__init__.py", "x = 1\n"), ("pkg/a.py", "a = 2\n"),
                       ("pkg/b.py", "b = 3\n"), ("pkg/mod.py", "é = 4\n"), ("pkg/_vendor/mod.py", "é = 4\n")):
        (site.parent if path == "os.py" else site).joinpath(path).write_text(text * 100)
    (site / "pkg" / "latin.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))  # left out: not UTF-8
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(stdlib), "purelib": str(site), "platlib": str(site)})
    record = saved_runs.corpus_record({"name": "text", "corpus": "python-installed", "seq_len": 8, "eval_fraction": 0.25,
                                       "split": "file"})
    assert (record["files"], record["bytes"]) == (5, 100 * (11 + 6 + 6 + 6 + 7))
    assert record["bytes"] == record["train_tokens"] + record["eval_tokens"]  # byte tokens: one byte each
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "book.txt.gz").write_bytes(gzip.compress(b"all work and no play\n" * 1000))
    record = saved_runs.corpus_record({"name": "text", "corpus": str(tmp_path / "gz"), "seq_len": 8})
    assert (record["files"], record["bytes"]) == (1, 21_000)


def test_the_status_of_the_text_pilot_counts_the_pilots_runs(tmp_path, capsys):
    # it answered for text_scale: "text_scale: 3 of 18 declared runs saved" and 15 runs left, none of them the pilot's
    import importlib.util

    from psattn.experiments.studies import text_scale

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    (tmp_path / "text_scale").mkdir()
    pilot = text_scale.text_scale_pilot("full")
    for config in pilot[:2]:
        (tmp_path / "text_scale" / f"{config.name}.json").write_text("{}")  # status reads the names alone
    assert gpu_sweeps.main(["status", "text_scale_pilot", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"text_scale_pilot: 2 of 3 declared runs saved in {tmp_path / 'text_scale'}", f"  left: {pilot[2].name}"]
    assert gpu_sweeps.main(["status", "text_scale", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("text_scale: 2 of 18 declared runs saved")


def test_a_pilot_piece_counts_the_pilots_runs_saved_not_every_run_of_its_folder(tmp_path, capsys):
    # text_scale's folder holds the pilot's runs and the sweep's others: it said "4 of 2 now saved or packed"
    import importlib.util

    from psattn.experiments.studies import text_scale

    spec = importlib.util.spec_from_file_location("gpu_sweeps", ROOT / "benchmarks" / "gpu_sweeps.py")
    gpu_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sweeps)
    results, pilot = tmp_path / "text_scale", text_scale.text_scale_pilot("quick")
    results.mkdir()
    others = [c for c in text_scale.text_scale("quick") if c not in pilot][:3]
    for config in [pilot[0], *others]:
        (results / f"{config.name}.json").write_text("{}")  # the pack reads the names alone
    gpu_sweeps._pack_finished(pilot, results, tmp_path / "runs", tmp_path / "out", "text_scale_pilot")
    assert capsys.readouterr().out.strip().endswith("; 1 of 2 now saved or packed")


def test_a_join_that_fails_leaves_the_earlier_copy_of_the_run_as_it_was(tmp_path, monkeypatch):
    # it deleted the earlier copy's files first: a full disk at checkpoint.pt left no checkpoint at all
    import errno

    from psattn.experiments import run_parts

    earlier, later = _two_copies_of_a_run(tmp_path)
    parts = run_parts.split_run(later, tmp_path / "out", "text_scale-in-progress")
    real = Path.write_bytes

    def disk_full(self, data):
        if self.name == "checkpoint.pt":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run_parts.join_run(parts, tmp_path / "runs")
    monkeypatch.setattr(Path, "write_bytes", real)
    assert {p.name: p.read_bytes() for p in earlier.iterdir()} == {
        "config.json": b'{"name": "run-a"}', "metrics.jsonl": b'{"step": 100}\n', "checkpoint.pt": b"step 100",
        "result.json": b"{}"}
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["run-a"]  # no staging folder left
    assert run_parts.join_run(parts, tmp_path / "runs") == earlier  # then a join that succeeds replaces it whole
    assert {p.name: p.read_bytes() for p in earlier.iterdir()} == {
        "config.json": b'{"name": "run-a"}', "metrics.jsonl": b'{"step": 200}\n', "checkpoint.pt": b"step 200"}


def _two_copies_of_a_run(tmp_path):
    """An earlier copy of run-a under runs/ (step 100, with a result.json) and a later one (step 200) in a piece."""
    earlier, later = tmp_path / "runs" / "run-a", tmp_path / "piece" / "run-a"
    for folder, step in ((earlier, 100), (later, 200)):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"name": "run-a"}')
        (folder / "metrics.jsonl").write_text(f'{{"step": {step}}}\n')
        (folder / "checkpoint.pt").write_bytes(b"step %d" % step)
    (earlier / "result.json").write_text("{}")  # a file the joined copy does not hold
    return earlier, later


def test_a_stop_while_a_join_moves_its_files_in_waits_until_the_run_directory_is_whole(tmp_path, monkeypatch):
    """join_run moved the joined files in one by one with no stop held: a SIGTERM after the first ended the
    process with the later copy's config.json beside the earlier copy's metrics and checkpoint (its result.json
    gone), and its staging folder left beside the run directory."""
    import signal

    from helpers import Ended, default_action_raises
    from psattn.experiments import run_parts

    earlier, later = _two_copies_of_a_run(tmp_path)
    parts = run_parts.split_run(later, tmp_path / "out", "text_scale-in-progress")
    replace = os.replace

    def replace_then_stop(src, dst):
        replace(src, dst)
        os.kill(os.getpid(), signal.SIGTERM)

    def left():  # what a process ended by the signal leaves
        return sorted(p.name for p in (tmp_path / "runs").iterdir()), {p.name: p.read_bytes() for p in earlier.iterdir()}

    monkeypatch.setattr(run_parts.os, "replace", replace_then_stop)
    with default_action_raises(signal.SIGTERM, left) as seen, pytest.raises(Ended):
        run_parts.join_run(parts, tmp_path / "runs")
    assert seen == [(["run-a"], {"config.json": b'{"name": "run-a"}', "metrics.jsonl": b'{"step": 200}\n',
                                 "checkpoint.pt": b"step 200"})]


def test_the_staging_folder_of_a_join_killed_outright_is_removed_by_the_next_join(tmp_path):
    """A SIGKILL to join_run (no finally runs) left its .run-a.joining-* folder beside the run directory for good;
    the next join removes it, and keeps a join's that is still running (this process's)."""
    from psattn.experiments import run_parts

    earlier, later = _two_copies_of_a_run(tmp_path)
    parts = run_parts.split_run(later, tmp_path / "out", "text_scale-in-progress")
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from psattn.experiments import run_parts
        run_parts.os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)  # killed as it moves in
        run_parts.join_run({[str(p) for p in parts]!r}, {str(tmp_path / "runs")!r})
        """)], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = [p.name for p in (tmp_path / "runs").iterdir() if p.name != "run-a"]
    assert len(left) == 1 and left[0].startswith(".run-a.joining-"), left
    running = tmp_path / "runs" / f".run-a.joining-{os.getpid()}-x"  # a join of this process, still at work
    running.mkdir()
    assert run_parts.join_run(parts, tmp_path / "runs") == earlier
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [running.name, "run-a"]
    assert (earlier / "checkpoint.pt").read_bytes() == b"step 200"


def test_a_split_cut_short_leaves_no_part(tmp_path):
    """split_run wrote each part in place: a full disk (or a kill) cut a part short under its whole name, over the
    part an earlier split had written there."""
    from helpers import file_size_limit
    from psattn.experiments import run_parts

    earlier, later = _two_copies_of_a_run(tmp_path)
    (earlier / "result.json").unlink()
    parts = run_parts.split_run(earlier, tmp_path / "out", "run-a", part_bytes=4096)
    assert len(parts) > 1
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with file_size_limit(1000), pytest.raises(OSError, match=r"run-a\.tar\.00-of-\d\d failed .*is intact"):
        run_parts.split_run(later, tmp_path / "out", "run-a", part_bytes=4096)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_a_split_into_fewer_parts_replaces_the_earlier_ones(tmp_path):
    """A run split again in fewer parts left the earlier split's parts of another count beside the new ones (the
    run's parts no longer joined: two archives); another stem's parts stay."""
    from psattn.experiments import run_parts

    earlier, later = _two_copies_of_a_run(tmp_path)
    out = tmp_path / "out"
    (out / "other").mkdir(parents=True)
    kept = out / "run-b.tar.00-of-09"
    kept.write_bytes(b"another run's part")
    three = run_parts.split_run(earlier, out, "run-a", part_bytes=4096)
    fewer = run_parts.split_run(earlier, out, "run-a", part_bytes=8 * 4096)
    assert len(fewer) < len(three)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run-a")) == sorted(p.name for p in fewer)
    assert kept.read_bytes() == b"another run's part"
    assert run_parts.join_run(sorted(out.glob("run-a.tar.*")), tmp_path / "joined").name == earlier.name


def test_an_unpack_whose_write_fails_leaves_the_saved_summary_whole(tmp_path):
    # a plain write_bytes cut the summary already saved to the first 4096 bytes of the new one: no JSON
    summary = {"format": saved_runs.FORMAT, "name": "run-a", "config": {}, "result": {}, "history": []}
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "run-a.json").write_text(json.dumps({**summary, "history": [{"step": i} for i in range(2000)]}))
    archive = saved_runs.pack([tmp_path / "staging" / "run-a.json"], tmp_path / "text_scale.tar.gz", "text_scale")
    saved = tmp_path / "results" / "text_scale" / "run-a.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(summary))
    code = ("import resource, signal, sys\nfrom psattn.experiments import saved_runs\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # a write past the limit fails (EFBIG), as on a full disk
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
            "try:\n    saved_runs.unpack(sys.argv[1], sys.argv[2])\nexcept OSError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code, str(archive), str(tmp_path / "results")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)
    assert "File too large" in done.stdout, done.stderr
    assert json.loads(saved.read_text()) == summary
    assert [p.name for p in saved.parent.iterdir()] == ["run-a.json"]  # no temporary file left


def test_the_paper_scale_figure_names_the_cap_and_draws_the_plain_model_once_in_its_own_colour(tiny_sweep, monkeypatch):
    # its legend named the two shears alone (the dotted cap and the hollow dots unexplained), and the plain model's
    # seeds at gamma 0 were drawn in the symmetric colour and again in the key-only one
    pytest.importorskip("matplotlib")
    import psattn.figures

    drawn = []
    monkeypatch.setattr(psattn.figures, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    results = {c.name: load_result(tiny_sweep[0] / c.name) for c in paper_scale.paper_scale("quick")}
    paper_scale.scale_figure(results, "unused.png")
    for ax in drawn[0].axes:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "symmetric", "key_only", "plain model (gamma 0)", "cap, 8 steps (hollow: not emerged)"]
        assert {line.get_color() for line in ax.get_lines() if list(line.get_xdata()) == [0.0]} == {"black"}


def test_a_summary_finds_the_phase_change_the_runs_own_history_finds():
    # each layer's best head was rounded to 4 digits: 0.09996 became the threshold, 0.1, a phase change the run lacks
    from psattn.experiments.phase_change import detect_phase_change

    rows = [{"step": s, "tokens": s * 100, "icl_score": -0.1, "prefix_matching_score": [[0.02, score], [score, 0.0]]}
            for s, score in ((0, 0.01), (100, 0.05), (200, 0.09996), (300, 0.09997), (400, 0.05))]
    compact = saved_runs.compact_history(rows)
    assert detect_phase_change(rows) is None and detect_phase_change(compact) is None
    assert compact[2]["prefix_matching_score"] == [[0.09996], [0.09996]] and compact[-1] == rows[-1]


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_parts_are_joined_removes_the_staging_folder(tmp_path, signum):
    """SIGTERM or SIGHUP while ``join_run`` wrote the run's files beside it ended the process on the spot and left
    the hidden ``.RUN.joining-*`` folder, with the files written so far, beside the runs."""
    import signal

    from psattn.experiments import run_parts

    run = tmp_path / "a" / "paper_scale_run"
    run.mkdir(parents=True)
    for path in run_files(run)[:4]:
        path.write_bytes(os.urandom(3000))
    parts = run_parts.split_run(run, tmp_path / "out", "paper_scale-in-progress", part_bytes=4096, max_parts=10)
    script = tmp_path / "join.py"
    script.write_text(f"""
import os, signal, sys
from psattn.experiments import run_parts

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
held = run_parts.stop_signals_held

def stopped_first():  # the files written into the staging folder, before they move in
    os.kill(os.getpid(), signal.{signum})
    return held()

run_parts.stop_signals_held = stopped_first
run_parts.join_run(sys.argv[2:], sys.argv[1])
""")
    runs = tmp_path / "b"
    done = subprocess.run([sys.executable, str(script), str(runs), *map(str, parts)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert list(runs.iterdir()) == []  # no staging folder, no half run
