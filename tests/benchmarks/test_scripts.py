"""The benchmark scripts run (tiny settings): they must not rot between the runs that use them."""

import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from psattn.ops import psa_attention_reference

ROOT = Path(__file__).resolve().parents[2]


def run(*args, timeout=300):
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


#: every section of gpu_check.py but "compile", which the compile-section test below runs (about 25 s on a cold
#: inductor cache, as in CI) and checks the rows of
SMOKE_SECTIONS = ["commands", "fused_correctness", "fused_kernel", "rope_shear", "model_step", "host_overhead",
                  "equivalence", "kernels", "phase_transition"]


def test_the_smoke_run_names_every_section_but_compile():
    assert SMOKE_SECTIONS == [name for name in _script("gpu_check").SECTION_S if name != "compile"]


@pytest.mark.slow
def test_gpu_check_smoke(tmp_path):
    out = run("benchmarks/gpu_check.py", "--smoke", "--backward-variants", "--out", str(tmp_path), "--only", *SMOKE_SECTIONS)
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert {"math forward", "math forward+backward"} <= set(result["kernels"])
    commands = result["commands"]
    assert {"train text", "sweep", "eval text", "generate text", "export hf induction", "hf integration"} <= set(commands)
    assert all(row["status"] == "ok" for row in commands.values()), commands
    from psattn.ops.fused_attention import interpreter_unusable

    unusable = interpreter_unusable()
    if unusable is None:
        assert max(max(case.values()) for case in result["fused_correctness"].values()) < 1e-5
        fused = result["fused_kernel"]["T=33 D=16"]  # in Triton's interpreter: correct, not fast
        assert fused["error_vs_fp64"]["psa_fused"] < 1e-5 and fused["forward+backward"]["psa_fused_ms"] > 0
        gaps = fused["backward_variant_gradient_gap"]  # each backward_variant against the default backward
        assert set(gaps) == {"fused_presheared", "fused_atomic_dq", "fused_presheared_atomic_dq"}
        assert max(gaps.values()) < 1e-5 and fused["forward+backward"]["fused_atomic_dq_over_fused"] > 0
    else:  # Triton's interpreter cannot run with this NumPy: the sections say so instead of failing
        assert result["skipped"] == {"fused_correctness": unusable, "fused_kernel": unusable}
    assert result["model_step"]["eager"]["ratio"] > 0
    overhead = result["host_overhead"]  # step_overhead.py's rows, on the device
    assert [r["step"] for r in overhead["training"] + overhead["decode"]] == ["training"] * 4 + ["decode"] * 4
    assert all(r["extra_operations"] == {"lerp": 2 * r["layers"]} for r in overhead["decode"])
    assert max(result["rope_shear"]["T=33 D=16"]["error_vs_fp64"].values()) < 1e-5
    equivalence = result["equivalence"]
    assert equivalence["math float32: fast PSA vs fp64 reference"] < 1e-5
    assert equivalence["math float32: SDPA vs fp64 plain attention"] < 1e-5
    assert "errors" not in result
    assert equivalence["psa-4m fp32: cached decoding vs full forward (logits)"] < 1e-4
    assert "compile" not in result  # the compile-section test runs it
    assert [(r["gamma"], r["seed"]) for r in result["phase_transition"]["runs"]] == [(0.8, 0), (0.0, 0)]
    for r in result["phase_transition"]["runs"]:  # a step alone, and the span with the evaluations in it
        assert r["step_ms"] > 0 and r["span_ms_per_step"] > 0
    assert "ratio" in out


@pytest.mark.slow
def test_gpu_check_budget_cuts_the_phase_transition_short_but_keeps_the_file(tmp_path):
    run("benchmarks/gpu_check.py", "--smoke", "--budget-s", "0", "--out", str(tmp_path),
        "--only", "kernels", "phase_transition")  # the smoke test runs these sections in full
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["phase_transition"]["runs"] == [] and "kernels" in result  # on the CPU no section is skipped


def test_the_gpu_checks_phase_transition_model_has_the_parameters_the_docs_give():
    """docs/scale-out.md called the check's phase transition "the 91.3M-parameter" one: that is psa-92m at its default
    vocabulary of 8192; the check trains it at the induction task's 64, which at_scale.md gives as 85,068,288."""
    from psattn.models.presets import preset_parameter_count

    config = _script("gpu_check").phase_transition_config(0.8, 0, 3000, "cpu", smoke=False)
    count = f"{preset_parameter_count(config.model):,}"
    assert count == "85,068,288" and config.task.vocab_size == 64 and config.train.precision == "bf16"
    for page in ("scale-out.md", "at_scale.md"):
        assert f"psa-92m preset ({count} parameters at the" in " ".join((ROOT / "docs" / page).read_text().split()), page


def test_the_gpu_check_script_s_timeouts_add_up_to_the_wall_clock_the_docs_give():
    """docs/scale-out.md gave the check "a 9-minute wall clock a call"; its three timeouts (the CPU benchmark's rows,
    the transformers decode step, the check) add up to the 9 minutes 40 seconds its header gives."""
    script = (ROOT / "benchmarks" / "gpu_check.sh").read_text()
    seconds = sum(int(s) for s in re.findall(r"\btimeout (\d+) ", script))
    wall = f"{seconds // 60} minutes {seconds % 60} seconds"
    assert wall == "9 minutes 40 seconds" and f"wall clock of {wall}" in " ".join(script.split())
    assert f"at most {wall} a call" in " ".join((ROOT / "docs" / "scale-out.md").read_text().split())


@pytest.mark.parametrize("bad", [["--only", "fused_kernels"], ["--repeats", "0"]])
def test_gpu_check_refuses_bad_arguments_before_touching_a_saved_report(tmp_path, bad, monkeypatch, capsys):
    saved = tmp_path / "gpu_check.json"
    saved.write_bytes((ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json").read_bytes())
    before = saved.read_bytes()
    with pytest.raises(SystemExit) as exited:  # argparse's exit status 2, in this process
        main_output(monkeypatch, capsys, "gpu_check", "--smoke", "--out", str(tmp_path), *bad)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and ("unknown sections ['fused_kernels']" in err or "--repeats" in err)
    assert saved.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.json"]


@pytest.mark.parametrize("script", [pytest.param("hf_decode_speed", marks=pytest.mark.slow),  # imports transformers
                                    "trainer_speed", "gpu_tables", "bf16_error_budget", "step_overhead"])
def test_help_shows_the_docstrings_whole_first_paragraph(script, monkeypatch, capsys):
    import ast

    path = ROOT / "benchmarks" / f"{script}.py"
    first = ast.get_docstring(ast.parse(path.read_text())).split("\n\n")[0]
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps the help as it does in a process whose output is a pipe
    with pytest.raises(SystemExit) as exited:
        main_output(monkeypatch, capsys, script, "-h")
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert " ".join(first.split()) in shown and first.rstrip().endswith((".", ")"))


def test_gpu_check_sh_notes_an_unset_git_revision(tmp_path):
    import os

    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the script runs the whole check")

    env = {k: v for k, v in os.environ.items() if k != "PSATTN_GIT_REVISION"} | {"PYTHON": sys.executable,
                                                                                 "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # on a machine without CUDA it stops at the device check, after the note
    assert "note: PSATTN_GIT_REVISION unset" in done.stderr
    env["PSATTN_GIT_REVISION"] = "0" * 40
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert "PSATTN_GIT_REVISION" not in done.stderr


@pytest.mark.parametrize(("args", "extras"), [((), True), (("--only", "fused_correctness", "fused_kernel", "model_step"), True),
                                             (("--only", "commands", "host_overhead", "compile"), False),
                                             (("--only=kernels",), False), (("--only", "kernels", "--seeds", "2"), False)])
def test_gpu_check_sh_runs_the_cuda_benchmarks_once_per_check_run_in_pieces(tmp_path, args, extras):
    """attention_speed.py and hf_decode_speed.py (up to 130 s of a device call) run with a whole check or with the
    piece of the kernel's rows, not again in the other pieces; a stub python records what the script runs."""
    import os

    stub, log = tmp_path / "python3", tmp_path / "calls.log"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    stub.chmod(0o755)
    env = os.environ | {"PYTHON": str(stub), "OUT": str(tmp_path / "out"), "PSATTN_GIT_REVISION": "0" * 40}
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[-1].startswith("benchmarks/gpu_check.py") and calls[-1].endswith(" ".join(args))
    ran = {c.split()[0] for c in calls if c.split()[0].endswith("_speed.py")}
    assert ran == ({"benchmarks/attention_speed.py", "benchmarks/hf_decode_speed.py"} if extras else set())


def test_gpu_check_sh_smoke_runs_on_the_cpu_and_records_the_revision_given(tmp_path):
    """The script's own check on a machine without CUDA (it stopped at the device check): the smoke shapes of
    one section, with the revision given by name."""
    import os

    env = os.environ | {"PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "PSATTN_GIT_REVISION": "1" * 40}
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--smoke", "--only", "kernels"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert "math forward" in result["kernels"] and result["info"]["git"] == "1" * 40 and result["info"]["device"] == "cpu"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_check.json"]  # no CUDA benchmark rows


def test_the_kernel_page_shows_the_tables_of_the_saved_gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_tables", ROOT / "benchmarks" / "gpu_tables.py")
    gpu_tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_tables)
    page = (ROOT / "docs" / "kernel.md").read_text()
    shown = page.split("<!-- gpu-tables:begin -->\n")[1].split("<!-- gpu-tables:end -->")[0]
    folder = Path(shown.split("saved in `")[1].split("`")[0])
    assert shown == gpu_tables.tables(folder if folder.is_absolute() else ROOT / folder).replace(str(ROOT) + "/", "")


def _script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main_output(monkeypatch, capsys, script, *args):
    """What benchmarks/``script``.py prints, its ``main()`` run in this process with ``args`` as its command line
    (torch's threads and the logging it may turn off restored): for the checks of its output, not of a new process."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *args])
    threads, disabled = torch.get_num_threads(), logging.root.manager.disable
    try:
        _script(script).main()
    finally:
        torch.set_num_threads(threads)
        logging.disable(disabled)
    return capsys.readouterr().out


def test_the_saved_h200_check_ran_every_command_on_the_device_as_the_scale_out_page_says():
    """docs/scale-out.md says every command of gpu_check.sh ran on the device on an H200 on 2026-12-04; no test read
    the saved check's commands for it."""
    check = json.loads((ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json").read_text())
    assert check["info"]["device"] == "NVIDIA H200" and check["info"]["date"].startswith("2026-12-04")
    assert check["commands"] and all(command["status"] == "ok" for command in check["commands"].values())
    page = " ".join((ROOT / "docs" / "scale-out.md").read_text().split())
    assert "On an H200 on 2026-12-04 every command ran on the device." in page


def test_the_tables_of_a_check_cut_short_show_what_it_measured_and_why_the_rest_is_missing(tmp_path):
    saved = ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json"
    check = json.loads(saved.read_text())
    del check["model_step"], check["fused_correctness"]
    check["errors"] = {"fused_correctness": "RuntimeError: out of memory"}
    check["skipped"] = {"model_step": "it took about 150 s on an H200 and 20 s of the budget were left"}
    (tmp_path / "gpu_check.json").write_text(json.dumps(check))
    shown = _script("gpu_tables").tables(tmp_path)
    assert "| 8, 16, 4096, 128 | forward |" in shown and "psa-92m step" not in shown
    assert "Section `fused_correctness` failed on the device: RuntimeError: out of memory" in shown
    assert "Section `model_step` was skipped: it took about 150 s" in shown


@pytest.mark.slow
def test_an_only_run_adds_its_sections_to_the_saved_report_and_each_table_names_its_run(tmp_path):
    saved = ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json"
    before = json.loads(saved.read_text())
    before["errors"] = {"kernels": "RuntimeError: an earlier failure"}  # replaced by the section's new run
    (tmp_path / "gpu_check.json").write_text(json.dumps(before))
    run("benchmarks/gpu_check.py", "--smoke", "--out", str(tmp_path), "--only", "kernels")
    after = json.loads((tmp_path / "gpu_check.json").read_text())
    for name in ("commands", "fused_correctness", "fused_kernel", "model_step", "phase_transition", "compile"):
        assert after[name] == before[name], name
    assert "math forward" in after["kernels"] and "flash forward" not in after["kernels"] and "errors" not in after
    assert after["section_info"]["fused_kernel"] == before["info"] and after["section_info"]["kernels"] == after["info"]
    assert after["section_seconds"]["fused_kernel"] == before["section_seconds"]["fused_kernel"]
    shown = _script("gpu_tables").tables(tmp_path)
    assert "in several runs, each table's named above it" in shown
    assert "`fused_kernel`: NVIDIA H200, torch 2.11.0+cu130, Triton 3.6.0, 2026-12-04, git 24285d5." in shown


def test_an_only_run_adds_to_a_check_saved_by_an_earlier_call(tmp_path, monkeypatch, capsys):
    # a device machine empties OUT before each call: the second piece names the first one's check, carried along
    saved = ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json"
    before = json.loads(saved.read_text())
    gpu_check = _script("gpu_check")
    info = {"date": "2026-12-06T00:00:00+00:00", "device": "NVIDIA H100"}
    report = gpu_check.Report(tmp_path / "out" / "gpu_check.json", info, rerun=["compile"], add_to=saved)
    report.ran("compile")
    report.data["compile"] = {"eager": {}}
    report.save()
    after = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    for name in ("commands", "fused_correctness", "fused_kernel", "model_step"):
        assert after[name] == before[name] and after["section_info"][name] == before["info"], name
    assert after["section_info"]["compile"] == info and after["compile"] == {"eager": {}}
    assert json.loads(saved.read_text()) == before  # the saved check is read, never written
    for bad, why in ((["--add-to", str(saved)], "--add-to needs --only"),
                     (["--only", "kernels", "--add-to", str(tmp_path / "none.json")], "no such file")):
        with pytest.raises(SystemExit) as exited:  # argparse's exit status 2, in this process
            main_output(monkeypatch, capsys, "gpu_check", "--smoke", "--out", str(tmp_path / "x"), *bad)
        assert exited.value.code == 2 and why in capsys.readouterr().err and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_the_compile_section_keeps_its_rows_as_they_come_and_each_renders(tmp_path):
    """A `timeout` that cuts the section (about 3 minutes on a GPU) keeps the settings and profiles it finished;
    each kept state makes a table, marked as cut short."""
    gpu_check, tables = _script("gpu_check"), _script("gpu_tables")
    kept: list[dict] = []
    result = gpu_check.compile_check("cpu", True, keep=lambda rows: kept.append(json.loads(json.dumps(rows))))
    assert result["largest_relative_loss_gap"] < 1e-3  # fp32 on the CPU: compiled trains like eager
    assert "cuda_graphs" not in result  # a CUDA setting: on the CPU it is the default mode again
    assert "compiled_scored" not in result  # a CUDA setting: on the CPU every compiled step is so
    profile = result["eager_step_profile"]  # on the CPU: the operators' own time, no device to wait for
    assert profile["kernel_ms"] > 0 and profile["wall_ms"] > 0 and "syncs_per_step" not in profile
    assert math.isfinite(profile["wall_ms_unread"])  # a difference of two runs' times: on the CPU, as noisy as they are
    scale = result["paper_scale_step_profile"]  # the quick plan's first model on the CPU
    assert scale["kernel_ms"] > 0 and (scale["preset"], scale["batch"]) == ("L2d16h2", 8)
    plain = result["paper_scale_step_profile_plain"]  # the same run with plain attention
    assert plain["kernel_ms"] > 0 and plain["preset"] == "L2d16h2" and "launches_per_step" not in plain  # CUDA only
    assert "paper_scale_step_profile_rope_shear_eager" not in result  # rope_shear compiles on CUDA only
    assert [sorted(k)[-1] for k in kept[:2]] == ["precision", "step_time_ratio_compiled_over_eager"]  # eager, compiled
    assert kept[-1] == json.loads(json.dumps(result)) and len(kept) == 2 + 3  # two settings, three profiles on the CPU
    for rows in kept[:-1]:
        shown = tables.compile_table({"compile": {**rows, "unfinished": True}})
        assert "cut short" in shown and "| eager |" in shown
    assert "cut short" not in tables.compile_table({"compile": result})


def test_an_only_run_refuses_a_damaged_saved_report_and_leaves_it(tmp_path):
    (tmp_path / "gpu_check.json").write_text('{"info": {"date": ')
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--smoke", "--out", str(tmp_path), "--only",
                           "kernels"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "is not a saved check" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "gpu_check.json").read_text() == '{"info": {"date": '


def test_the_errors_are_taken_on_the_last_rows_which_see_every_key():
    gpu_check = _script("gpu_check")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 8, generator=g) for _ in range(3))

    def off_at(row):
        def attention(q, k, v):
            out = psa_attention_reference(q.double(), k.double(), v.double(), is_causal=True).float()
            out[:, :, row] += 1.0
            return out
        return attention

    errors = gpu_check._errors(q, k, v, {"sdpa": off_at(0), "fused_gamma0": off_at(39)}, rows=8)
    assert errors["sdpa"] < 1e-6 and errors["fused_gamma0"] == pytest.approx(1.0, abs=1e-6)


def test_the_model_step_table_names_the_preset_and_precision_the_check_ran():
    step = {"preset": "psa-4m", "precision": "fp32", "batch": 2, "length": 32,
            "eager": {"plain_ms": 1.0, "psa_ms": 1.1, "ratio": 1.1}}
    shown = _script("gpu_tables").model_step_table({"model_step": step})
    assert shown.startswith("| psa-4m step, B 2, T 32, fp32 |") and "| eager | 1.00 | 1.10 | 1.100 |" in shown


def test_the_compile_table_shows_each_setting_the_profile_and_a_failed_setting():
    compile_ = {"batch": 64, "length": 64, "eager": {"step_ms": 20.0}, "compiled": {"step_ms": 25.0},
                "cuda_graphs": {"error": "RuntimeError: a CUDA graph refused"},
                "step_time_ratio_compiled_over_eager": 1.25, "largest_relative_loss_gap": 0.004,
                "compiled_scored": {"step_ms": 15.0}, "step_time_ratio_compiled_scored_over_eager": 0.75,
                "largest_relative_loss_gap_compiled_scored": 0.003,
                "eager_step_profile": {"steps": 10, "wall_ms": 20.5, "kernel_ms": 1.25,
                                       "syncs_per_step": {"trainer.py:112": 1.0, "loss.py:38": 2.0}},
                "paper_scale_step_profile": {"error": "OutOfMemoryError: no room", "preset": "psa-92m", "batch": 64,
                                             "length": 64},
                "paper_scale_step_profile_plain": {"steps": 10, "wall_ms": 50.0, "wall_ms_unread": 41.25, "kernel_ms": 4.5,
                                                   "launches_per_step": 2046.0,
                                                   "syncs_per_step": {}, "preset": "psa-92m", "batch": 64, "length": 64}}
    shown = _script("gpu_tables").compile_table({"compile": compile_})
    assert shown.startswith("| psa-4m trainer step on induction, B 64, T 64, bf16 |")
    assert "| eager | 20.00 | 1 |  |" in shown and "| `train.compile=true` | 25.00 | 1.250 | 0.004 |" in shown
    assert "(CUDA graphs) | failed: RuntimeError: a CUDA graph refused |" in shown
    assert "| `train.compile=true`, the scored positions alone | 15.00 | 0.750 | 0.003 |" in shown
    assert ("psa-4m's eager step: 20.50 ms of wall time, 1.25 ms of kernels (torch.profiler); waits for the device "
            "per step: `trainer.py:112` 1, `loss.py:38` 2.") in shown
    assert "Profiling the paper-scale sweep's eager psa-92m step (B 64, T 64) failed: OutOfMemoryError: no room" in shown
    assert ("The same run with plain attention, its eager psa-92m step (B 64, T 64): 50.00 ms of wall time (41.25 ms with "
            "nothing read back between evaluations), 4.50 ms of kernels (torch.profiler), 2046 launches; waits for the device "
            "per step: none.") in shown
    older = {"eager": {"step_ms": 21.9}, "compiled": {"step_ms": 24.5}, "step_time_ratio_compiled_over_eager": 1.12,
             "largest_relative_loss_gap": 0.006}  # the 2026-12-04 run: no shape, CUDA graphs or profile
    assert _script("gpu_tables").compile_table({"compile": older}).startswith("| psa-4m trainer step on induction, bf16 |")


def test_the_compile_table_of_a_check_whose_eager_setting_failed_shows_the_other_settings():
    """compile_check records a failed eager setting and still trains the others, which then have no ratio to
    eager: the table shows them without one (it raised KeyError, and gpu_tables.py printed no table at all)."""
    compile_ = {"batch": 64, "length": 64, "eager": {"error": "RuntimeError: an eager step failed"},
                "compiled": {"step_ms": 25.0, "train_loss": [4.0, 3.9]}}
    shown = _script("gpu_tables").compile_table({"compile": compile_})
    assert "| eager | failed: RuntimeError: an eager step failed | | |" in shown
    assert "| `train.compile=true` | 25.00 | — | — |" in shown


def test_on_a_gpu_a_section_that_cannot_end_inside_the_budget_is_skipped():
    import torch

    gpu_check = _script("gpu_check")
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert gpu_check.skip_reason("model_step", 400, cuda) is None
    assert "150 s on an H200 and 100 s" in gpu_check.skip_reason("model_step", 100, cuda)
    assert gpu_check.skip_reason("model_step", 0, cpu) is None  # the smoke run on the CPU runs everything
    kernel_sections = ("fused_correctness", "fused_kernel", "rope_shear", "model_step")
    assert sum(gpu_check.SECTION_S[name] for name in kernel_sections) <= 420  # the default budget holds them


def test_the_pieces_gpu_check_sh_names_run_every_section_each_inside_the_budget():
    """On a GPU the whole check runs what fits in its budget and skips the rest: the pieces the script's header
    names (--only ...) hold every section between them, each piece's H200 estimates inside the default budget
    (equivalence, kernels and phase_transition were in none)."""
    import re

    gpu_check = _script("gpu_check")
    header = " ".join(line.lstrip("# ") for line in (ROOT / "benchmarks" / "gpu_check.sh").read_text().splitlines()
                      if line.startswith("#"))
    names = "|".join(gpu_check.SECTION_S)
    pieces = [m.split() for m in re.findall(rf"--only ((?:(?:{names})\b ?)+)", header)]
    assert {name for piece in pieces for name in piece} == set(gpu_check.SECTION_S)
    assert all(sum(gpu_check.SECTION_S[name] for name in piece) <= 420 for piece in pieces)


def test_attention_speed_small_shape(monkeypatch, capsys):
    out = main_output(monkeypatch, capsys, "attention_speed", "--batch", "1", "--heads", "2", "--length", "64",
                      "--head-dim", "16", "--repeats", "2")
    assert "forward+backward" in out and "cache bytes per token of a sequence per layer" in out and "kept" not in out


def test_the_timed_decode_step_attends_to_the_whole_cache():
    """The decode row times a token at position T over T cached keys: its output equals the last row
    of the full forward over the prompt and the token (it once attended to key 0 alone)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("attention_speed", ROOT / "benchmarks" / "attention_speed.py")
    attention_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(attention_speed)
    import torch

    from psattn.models import AttentionConfig, PhaseSpaceAttention, build_context

    torch.manual_seed(0)
    for attention in (AttentionConfig("baseline"), AttentionConfig("symmetric", 0.8)):
        layer = PhaseSpaceAttention(32, 2, attention=attention).double()
        prompt, step = torch.randn(2, 12, 32, dtype=torch.double), torch.randn(2, 1, 32, dtype=torch.double)
        cache = attention_speed.prefilled(layer, prompt)
        with torch.no_grad():
            decoded = layer(step, build_context(2, 1, step.device, cache=cache), cache.layers[0])
            full = layer(torch.cat([prompt, step], 1), build_context(2, 13, step.device))
        torch.testing.assert_close(decoded, full[:, -1:], rtol=1e-12, atol=1e-12)
        for stored in (cache.layers[0].keys, cache.layers[0].values):  # each head's rows dense, not a transposed view
            assert stored.stride()[2:] == (stored.shape[3], 1)


def test_attention_speed_can_time_the_decode_step_alone(tmp_path, monkeypatch, capsys):
    out = main_output(monkeypatch, capsys, "attention_speed", "--batch", "1", "--heads", "2", "--length", "64",
                      "--head-dim", "16", "--repeats", "1", "--decode-only", "--json", str(tmp_path / "decode.json"))
    assert "decode step" in out and "forward" not in out
    saved = json.loads((tmp_path / "decode.json").read_text())
    assert saved["decode_only"] and list(saved["ratios"]) == ["decode step (layer, symmetric)"]


def test_attention_speed_can_keep_freed_memory():
    out = run("benchmarks/attention_speed.py", "--batch", "1", "--heads", "2", "--length", "64", "--head-dim", "16",
              "--repeats", "1", "--keep-freed-memory")
    assert ", freed memory kept" in out.splitlines()[0] and "decode step" in out


def test_the_scale_out_page_quotes_the_saved_compiled_over_eager_ratios():
    """docs/scale-out.md's compiled-over-eager ratios from trainer_speed.py --compile had no saved output to check
    them against; the page now quotes a saved run's two, and this compares them with its lines."""
    root = Path(__file__).resolve().parents[2]
    saved = (root / "docs/results/cpu/trainer_speed_compile/2026-12-08-8daebca.txt").read_text()
    ratios = re.findall(r"^eager .* ratio (\d\.\d{3})$", saved, flags=re.M)
    page = " ".join((root / "docs" / "scale-out.md").read_text().split())
    assert ratios == ["1.012", "1.000"] and f"{ratios[0]} and {ratios[1]} at git 8daebca" in page


@pytest.mark.parametrize("task", ["induction", "text"])
def test_trainer_speed_runs(task, monkeypatch, capsys):
    out = main_output(monkeypatch, capsys, "trainer_speed", "--task", task, "--steps", "3", "--repeats", "1")
    assert out.startswith(task) and "ratio" in out


def test_trainer_speed_times_the_compiled_trainer_against_eager(monkeypatch, capsys):
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, mode: real_compile(model, backend="eager"))  # traced, not built
    out = main_output(monkeypatch, capsys, "trainer_speed", "--compile", "--steps", "3", "--repeats", "1")
    assert out.startswith("induction") and ", 1 thread," in out
    assert "eager" in out and "train.compile=true" in out and "ratio" in out


def test_step_overhead_counts_and_times_both_models(tmp_path, monkeypatch, capsys):
    out = main_output(monkeypatch, capsys, "step_overhead", "--presets", "psa-4m", "--repeats", "2", "--json",
                      str(tmp_path / "s.json"))
    assert "| psa-4m | training | fp32 |" in out and "| psa-4m | training | bf16 autocast |" in out
    assert "| psa-4m | decode | fp32 |" in out and "| psa-4m | decode | bf16 weights |" in out
    saved = json.loads((tmp_path / "s.json").read_text())
    rows, decode = saved["rows"], saved["decode_rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16 autocast"]
    assert [r["precision"] for r in decode] == ["fp32", "bf16 weights"]
    for r in rows + decode:
        assert r["layers"] == 3 and 0 < r["extra_operations_per_layer"] <= 10 and not r["fewer_operations"]
        assert r["operations"]["psa"] - r["operations"]["plain"] == sum(r["extra_operations"].values())
        assert r["host_ms"]["plain"] > 0 and r["host_ratio"] > 0
    for r in decode:  # a decoded row's shear is one lerp a stream: nothing else is dispatched beyond plain decoding
        assert r["extra_operations"] == {"lerp": 2 * r["layers"]}


def test_output_layer_share_times_the_step_with_and_without_the_output_layer(tmp_path, monkeypatch, capsys):
    out = main_output(monkeypatch, capsys, "output_layer_share", "--layers", "1", "--repeats", "1", "--json",
                      str(tmp_path / "share.json"))
    assert "BPE 1024, width 128, 32 rows of 256 tokens" in out and "| 1 layer, key_only |" in out
    (row,) = json.loads((tmp_path / "share.json").read_text())["rows"]
    assert row["ms"]["with"] > row["ms"]["without"] > 0 and 0 < row["output_layer_share"] < 1


def test_the_text_page_quotes_the_saved_output_layer_share_runs():
    """docs/text.md said the output layer and its softmax were "most of a step" of the quick text models, which nothing
    measured; it quotes the saved runs of benchmarks/output_layer_share.py now (under half of a one-layer step)."""
    runs = [json.loads(p.read_text()) for p in sorted((ROOT / "docs" / "results" / "cpu" / "output_layer_share").glob("*.json"))]
    assert len(runs) == 2 and {run["git"][:7] for run in runs} == {"f1d1bbc"}
    text = " ".join((ROOT / "docs" / "text.md").read_text().split())
    shares = {layers: sorted(round(100 * r["output_layer_share"]) for run in runs for r in run["rows"] if r["layers"] == layers)
              for layers in (1, 2)}
    assert (f"take {shares[1][0]}–{shares[1][-1]} % of a one-layer step and {shares[2][0]}–{shares[2][-1]} % of a "
            "two-layer one") in text and "at git f1d1bbc" in text


def test_the_kernel_page_quotes_the_saved_step_overhead_runs(monkeypatch, capsys):
    folder = ROOT / "docs" / "results" / "cpu" / "step_overhead"
    table = main_output(monkeypatch, capsys, "step_overhead", "--table", str(folder / "2026-12-06.json"),
                        str(folder / "2026-12-06-ops-of-9dbc32a.json"))
    assert table.strip() in (ROOT / "docs" / "kernel.md").read_text()
    decode = main_output(monkeypatch, capsys, "step_overhead", "--decode-table",
                         str(folder / "2026-12-06-decode" / "after-1.json"))
    assert decode.strip() in (ROOT / "docs" / "kernel.md").read_text()


@pytest.mark.slow
def test_gpu_check_records_a_failing_part_and_runs_the_next(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)

    def broken(*args, **kwargs):
        raise RuntimeError("no C compiler for inductor")

    monkeypatch.setattr(gpu_check, "compile_check", broken)
    monkeypatch.setattr("sys.argv", ["gpu_check.py", "--smoke", "--out", str(tmp_path),
                                     "--only", "compile", "phase_transition"])  # test_gpu_check_smoke runs the rest
    gpu_check.main()
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["errors"] == {"compile": "RuntimeError: no C compiler for inductor"}
    assert len(result["phase_transition"]["runs"]) == 2 and set(result["section_seconds"]) == {"compile", "phase_transition"}


def test_two_layer_recipes_build_and_change_what_they_say(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipes", ROOT / "scripts" / "two_layer_recipes.py")
    recipes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipes)
    for name, (fields, change, steps) in recipes.RECIPES.items():
        config = recipes.config_for(fields, change, steps)
        assert config.model.n_layers == 2 and config.model.attention.variant == "baseline", name
        model = recipes.build_model(config)
        recipes.change_model(model, change)
        if change == "zero MLP output":
            assert all(b.mlp.down.weight.abs().sum() == 0 for b in model.blocks)
        if change == "layer-1 norm bias N(0, 1)":
            assert model.blocks[0].norm_attn.bias.std() > 0.5 and model.blocks[1].norm_attn.bias.abs().sum() == 0
        if change == "embedding std 1":
            assert 0.9 < model.embed.weight.std() < 1.1
        if change == "layer-1 MLP frozen at init":
            assert not any(p.requires_grad for p in model.blocks[0].mlp.parameters())
            assert all(p.requires_grad for p in model.blocks[1].mlp.parameters())
        if isinstance(fields.get("mlp"), list):
            assert [b.mlp is not None for b in model.blocks] == fields["mlp"], name
    assert recipes.config_for({}, "lr=1e-3", 10).train.lr == 1e-3
    assert not recipes.config_for({}, "untied", 10).model.tie_embeddings
    monkeypatch.setitem(recipes.RECIPES, "tiny", ({"batch_size": 4}, None, 2))
    result = recipes.run("tiny")
    assert [r["step"] for r in result["history"]] == [0, 2] and len(result["history"][0]["induction"]) == 2


def test_a_recipe_whose_result_is_cut_short_runs_again(tmp_path, monkeypatch):
    """The result was written in place, and a recipe whose file exists is skipped: a write cut short (a full disk, a
    kill) left a truncated file on which every later invocation stopped with a JSONDecodeError."""
    import importlib.util

    from helpers import file_size_limit

    spec = importlib.util.spec_from_file_location("recipes", ROOT / "scripts" / "two_layer_recipes.py")
    recipes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipes)
    row = {"accuracy": 0.5, "previous_token": [0.1, 0.2], "induction": [0.3, 0.4]}
    monkeypatch.setattr(recipes, "run", lambda name: {"recipe": name, "history": [{"step": s, **row} for s in range(99)]})
    name = next(iter(recipes.RECIPES))
    with file_size_limit(1000), pytest.raises(OSError):
        recipes.main([str(tmp_path), name])
    assert not list(tmp_path.iterdir())
    recipes.main([str(tmp_path), name])
    assert len(json.loads((tmp_path / f"{name}.json").read_text())["history"]) == 99


def test_the_recipe_table_in_the_docs_is_what_the_saved_recipes_give(capsys, monkeypatch):
    """docs/text.md: the script, on the saved results, reads every recipe back instead of training it (two of its
    recipes had no saved result, so it trained them for minutes), and prints the page's table."""
    import importlib.util

    saved = ROOT / "docs" / "results" / "two_layer_recipes"
    spec = importlib.util.spec_from_file_location("recipes", ROOT / "scripts" / "two_layer_recipes.py")
    recipes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipes)
    monkeypatch.setattr(recipes, "run", lambda name: pytest.fail(f"{name} has no saved result: the script trains it"))
    recipes.main([str(saved)])  # every recipe, as `python scripts/two_layer_recipes.py OUT` runs them
    out = capsys.readouterr().out
    docs = (ROOT / "docs" / "text.md").read_text()
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(rows) == len(recipes.RECIPES) + 1 and all(line in docs for line in rows), out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hf_decode_speed_runs(dtype, monkeypatch, capsys):
    pytest.importorskip("transformers")
    out = main_output(monkeypatch, capsys, "hf_decode_speed", "--types", "llama", "phi", "--length", "16", "--repeats",
                      "2", "--dtype", dtype, "--json")
    assert f"(cpu, {dtype})" in out.splitlines()[0]
    record = json.loads(out.splitlines()[-1])
    ratios = record["results"]
    assert set(ratios) == {"llama", "phi"} and all(r["ratio"] > 0 for r in ratios.values())


@pytest.mark.slow  # imports transformers
def test_hf_decode_speed_json_records_the_run_as_the_saved_runs_do(monkeypatch, capsys):
    """``--json`` prints the record docs/results/cpu/hf_decode/ keeps (it printed the ratios alone: no date,
    revision, machine, dtype or settings, which the saved runs had to have added by hand)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["hf_decode_speed.py", "--types", "llama", "--length", "4", "--batch", "1",
                                      "--repeats", "1", "--dtype", "bfloat16", "--json"])
    threads, disabled = torch.get_num_threads(), logging.root.manager.disable
    try:
        _script("hf_decode_speed").main()
    finally:  # the script turns warnings off for its process: the later tests of this one still see theirs
        torch.set_num_threads(threads)
        logging.disable(disabled)
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    saved = json.loads((ROOT / "docs" / "results" / "cpu" / "hf_decode" / "2026-12-05" / "eager1.json").read_text())
    assert set(saved) - {"note"} <= set(record) and record["results"]["llama"]["ratio"] > 0
    assert (record["dtype"], record["threads"], record["length"], record["device"]) == ("bfloat16", 1, 4, "cpu")
    assert record["command"].endswith("--dtype bfloat16 --json") and record["date"] and record["git"]


@pytest.mark.slow  # torch.compile of two small models: about a minute
def test_hf_decode_speed_times_both_models():
    """The script's run; ``--compile`` wraps both models in ``torch.compile``, whose decoding of a patched model
    tests/integrations/test_hf_decoding.py checks (compiling here as well took a minute)."""
    pytest.importorskip("transformers")
    out = run("benchmarks/hf_decode_speed.py", "--types", "llama", "--length", "16", "--repeats", "2", "--json")
    assert "(cpu, float32)" in out.splitlines()[0]
    record = json.loads(out.splitlines()[-1])
    assert record["compiled"] is False and record["results"]["llama"]["ratio"] > 0


def test_the_cpu_speed_tables_are_the_saved_runs():
    folder = ROOT / "docs" / "results" / "cpu" / "attention_speed" / "2026-12-05b"
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]
    rows = ("forward", "forward+backward", "layer forward+backward", "decode step (layer, symmetric)")
    kept = {flag: [run for run in runs if run["keep_freed_memory"] == flag] for flag in (False, True)}
    assert len(kept[False]) == len(kept[True]) == 2

    def spread(flag, row):
        low, high = sorted(run["ratios"][row] for run in kept[flag])
        return f"{low:.3f}–{high:.3f}"

    kernel = (ROOT / "docs" / "kernel.md").read_text()
    for label, flag in (("default (glibc returns freed memory)", False), ("`--keep-freed-memory`", True)):
        assert f"| {label} | " + " | ".join(spread(flag, row) for row in rows) + " |" in kernel
    alone = [json.loads(path.read_text()) for path in sorted((folder / "decode-only").glob("*.json"))]
    alone_ratios = {flag: " and ".join(f"{run['ratios'][rows[3]]:.3f}" for run in
                                       sorted((r for r in alone if r["keep_freed_memory"] == flag), key=lambda r: r["date"]))
                    for flag in (False, True)}
    assert all(run["decode_only"] for run in alone)
    quoted = f"the row gave {alone_ratios[False]} with glibc's default allocator and {alone_ratios[True]} with freed memory"
    assert quoted in " ".join(kernel.split())
    reproduction = (ROOT / "docs" / "reproduction.md").read_text()
    first = next(run for run in runs if run["date"] == min(r["date"] for r in kept[False]))
    for label, row in zip(("forward", "forward + backward", "whole layer, forward + backward",
                           "one decode step (whole layer, 1024 cached tokens)"), rows, strict=True):
        ms = first["ms"][row]
        digits = 2 if row.startswith("decode") else 1
        both = [", ".join(f"{run['ratios'][row]:.3f}" for run in sorted(kept[flag], key=lambda r: r["date"]))
                for flag in (False, True)]
        assert f"| {label} | {ms['sdpa']:.{digits}f} | {ms['psa']:.{digits}f} | {both[0]} | {both[1]} |" in reproduction


def test_the_decode_reruns_quoted_in_kernel_md_are_the_saved_runs():
    folder = ROOT / "docs" / "results" / "cpu" / "attention_speed" / "2026-12-05c" / "decode-only"
    runs = {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}
    ratio = {name: run["ratios"]["decode step (layer, symmetric)"] for name, run in runs.items()}
    assert all(run["decode_only"] and run["git"].startswith("35bd19e") for run in runs.values())
    assert [run["keep_freed_memory"] for run in runs.values()] == [False, False, True, True]
    quoted = (f"{ratio['default1']:.3f} and {ratio['default2']:.3f} with glibc's default, {ratio['kept1']:.3f} and "
              f"{ratio['kept2']:.3f} with freed memory kept; still within the spread, and below 1.02 in "
              f"{['no', 'one', 'two', 'three', 'four'][sum(r < 1.02 for r in ratio.values())]} runs of four")
    assert quoted in " ".join((ROOT / "docs" / "kernel.md").read_text().split())
    hf = " ".join((ROOT / "docs" / "huggingface.md").read_text().split())
    assert f"({min(ratio.values()):.3f} to {max(ratio.values()):.3f} in four runs the same day" in hf


def test_the_hf_decode_figures_quoted_in_huggingface_md_are_the_saved_runs():
    folder = ROOT / "docs" / "results" / "cpu" / "hf_decode" / "2026-12-05"
    load = lambda pattern: [json.loads(p.read_text()) for p in sorted(folder.glob(pattern))]  # noqa: E731
    eager, before, compiled = load("eager[0-9].json"), load("eager-d864eb4-*.json"), load("compiled*.json")
    assert (len(eager), len(before), len(compiled)) == (3, 2, 2)
    assert {run["git"] for run in eager + compiled} == {"35bd19e"} and {run["git"] for run in before} == {"d864eb4"}
    docs = " ".join((ROOT / "docs" / "huggingface.md").read_text().split())

    def spread(runs, model_type):
        ratios = [run["results"][model_type]["ratio"] for run in runs]
        return f"{min(ratios):.3f}–{max(ratios):.3f}"

    for model_type in eager[0]["results"]:
        assert f"{spread(eager, model_type)} (" in docs, model_type
    mean = lambda runs: statistics.mean(r["ratio"] for run in runs for r in run["results"].values())  # noqa: E731
    assert f"; {mean(eager):.3f} on average." in docs and f"gave {mean(before):.3f} on average" in docs
    assert (f"{spread(compiled, 'llama')}, {spread(compiled, 'qwen3')} and {spread(compiled, 'gemma3_text')}."
            in docs)


def test_the_error_budget_pipelines_round_where_they_say(tmp_path):
    """Unrounded, the budget's attention is PSA's reference; each rounding only adds error, and rounding
    the sheared streams to fp16 loses less than rounding them to bf16."""
    budget = _script("bf16_error_budget")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 50, 16, generator=g, dtype=torch.float64) for _ in range(3))
    exact = psa_attention_reference(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True)[0, 0]
    q_hat, k_hat = (budget.shear(x, 0.8)[0, 0] for x in (q, k))
    torch.testing.assert_close(budget.attention(q_hat, k_hat, v[0, 0], slice(10, 50), None, chunk=16),
                               exact[10:], rtol=1e-12, atol=1e-12)

    out = tmp_path / "budget.json"
    run("benchmarks/bf16_error_budget.py", "--smoke", "--rows", "16", "--out", str(out))
    saved = json.loads(out.read_text())
    (shape,) = saved["shapes"].values()
    for errors in (shape["first_rows"], shape["last_rows"]):
        assert errors["output_only"] <= errors["sdpa"] and errors["psa_output_only"] <= errors["psa_fp16_streams"]
        assert errors["psa_fp16_streams"] < errors["psa_bf16"] < 0.1


def test_the_error_budget_table_in_the_docs_is_the_saved_run():
    saved = json.loads((ROOT / "docs" / "results" / "cpu" / "bf16_error_budget" / "2026-12-05.json").read_text())
    kernel = (ROOT / "docs" / "kernel.md").read_text()
    assert f"at git {saved['git'][:7]}" in kernel
    pipelines = ("sdpa", "output_only", "psa_bf16", "psa_fp16_streams", "psa_fp16_streams_p", "psa_output_only")
    for shape in saved["shapes"].values():
        B, H, T, D = shape["shape"]
        windows = {"all": shape["first_rows"]} if T <= saved["rows"] else {"first": shape["first_rows"],
                                                                          "last": shape["last_rows"]}
        for window, errors in windows.items():
            cells = " | ".join(f"{errors[name]:#.2g}" for name in pipelines)
            assert f"| {T}, {D}, {window} | {cells} |" in kernel, (T, D, window)


def _span(values, digits) -> str:
    return f"{min(values):.{digits}f} to {max(values):.{digits}f}"


def test_the_kernel_pages_sentences_on_the_gpu_check_are_its_saved_numbers():
    """docs/kernel.md's tables were checked against the saved check, the sentences that read them (ranges, the backward
    alone, TFLOP/s, error ratios) by no test; the page said "to 2e-6" where the check's largest fp32 error is 2.2e-6."""
    check = json.loads((ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json").read_text())
    page = " ".join((ROOT / "docs" / "kernel.md").read_text().split())
    fp32 = max(e for name, errors in check["fused_correctness"].items() if "bf16" not in name for e in errors.values())
    assert page.count(f"to {fp32:.1e}".replace("e-06", "e-6") + " in fp32") == 2 and "to 2e-6" not in page
    rows = list(check["fused_kernel"].values())
    fused = {p: [r[p]["fused_over_sdpa"] for r in rows] for p in ("forward", "forward+backward")}
    assert f"is {_span(fused['forward'], 2)} forward and {_span(fused['forward+backward'], 2)} forward+backward" in page
    long = [r for r in rows if r["shape"][2] >= 4096]
    shear = {p: [r[p]["shear_then_sdpa_over_sdpa"] for r in long] for p in ("forward", "forward+backward")}
    assert (f"costs {_span(shear['forward+backward'], 2)} forward+backward at T ≥ 4k, and {_span(shear['forward'], 2)} "
            "forward") in page
    backward = [(r["forward+backward"]["psa_fused_ms"] - r["forward"]["psa_fused_ms"])
                / (r["forward+backward"]["sdpa_ms"] - r["forward"]["sdpa_ms"]) for r in rows]
    assert f"takes {_span(backward, 2)}× SDPA's" in page
    widest = check["fused_kernel"]["T=16384 D=128"]
    B, H, T, D = widest["shape"]
    tflops = {k: 2 * B * H * T * T * D / widest["forward"][k] / 1e9 for k in ("psa_fused_ms", "sdpa_ms")}  # causal: half
    assert (f"runs at {tflops['psa_fused_ms']:.0f} TFLOP/s of causal attention where SDPA's flash runs at "
            f"{tflops['sdpa_ms']:.0f}") in page
    errors = {k: [r["error_vs_fp64"][k] for r in rows] for k in ("sdpa", "psa_sdpa", "psa_fused")}
    ratios = [r["error_vs_fp64"][k] / r["error_vs_fp64"]["sdpa"] for r in rows for k in ("psa_sdpa", "psa_fused")]
    assert (f"({_span(errors['psa_sdpa'] + errors['psa_fused'], 3)} against SDPA's own {_span(errors['sdpa'], 4)}: "
            f"{_span(ratios, 1)}×)") in page


def test_the_kernel_pages_sentences_on_the_error_budget_are_its_saved_numbers():
    """The error budget's table was checked against its saved run, the sentences that compare its columns by no test."""
    saved = json.loads((ROOT / "docs" / "results" / "cpu" / "bf16_error_budget" / "2026-12-05.json").read_text())
    page = " ".join((ROOT / "docs" / "kernel.md").read_text().split())
    first = [shape["first_rows"] for shape in saved["shapes"].values()]
    last = [shape["last_rows"] for shape in saved["shapes"].values() if shape["shape"][2] > saved["rows"]]

    def span(rows, f, fmt=".2g"):
        values = [f(e) for e in rows]
        return f"{min(values):{fmt}} to {max(values):{fmt}}"

    assert f"On the first rows, SDPA {span(first, lambda e: e['sdpa'])} here" in page
    assert f"PSA with q̂ and k̂ in bf16 {span(first, lambda e: e['psa_bf16'])} here" in page
    assert f"Rounding only the output gives {span(first + last, lambda e: 100 * e['output_only'] / e['sdpa'], '.0f')} %" in page
    assert f"costs {span(first + last, lambda e: e['psa_output_only'])} in every window" in page
    assert (f"That is {span(first, lambda e: e['psa_output_only'] / e['sdpa'], '.1f')}× SDPA's error on the first rows "
            f"and {span(last, lambda e: e['psa_output_only'] / e['sdpa'], '.0f')}× on the last rows") in page
    floor = span(first + last, lambda e: e["psa_bf16"] / e["psa_output_only"], ".1f")
    fp16 = span(first + last, lambda e: e["psa_fp16_streams"] / e["psa_output_only"], ".2f")
    assert f"bf16 error from {floor} times what rounding its output costs to {fp16} times" in page
    assert f"to bf16**: {floor}× the floor" in page
    assert (f"PSA comes to {fp16}× its floor, {span(first, lambda e: e['psa_fp16_streams'] / e['sdpa'], '.1f')}× SDPA's "
            "error on the first rows") in page


def test_the_kernel_tables_show_the_fp16_score_product_where_the_check_measured_it():
    gpu_tables = _script("gpu_tables")
    check = json.loads((ROOT / "docs" / "results" / "gpu" / "checks" / "2026-12-04-h200" / "gpu_check.json").read_text())
    assert "fp16 scores" not in gpu_tables.fused_kernel_table(check)  # a check from before they existed
    for i, row in enumerate(check["fused_kernel"].values()):
        row["error_vs_fp64"]["psa_fused_fp16_scores"] = 0.5 + i
        for label in ("forward", "forward+backward"):
            row[label]["fused_fp16_scores_over_sdpa"] = 2.0 + i
    table = gpu_tables.fused_kernel_table(check)
    assert "| fused kernel, fp16 scores / SDPA |" in table and "| fused kernel, fp16 scores, vs fp64 PSA |" in table
    first = next(iter(check["fused_kernel"].values()))
    shape, e, r = ", ".join(map(str, first["shape"])), first["error_vs_fp64"], first["forward"]
    assert f"| {shape} | {e['sdpa']:.4f} | {e['psa_sdpa']:.4f} | {e['psa_fused']:.4f} | 0.5000 |" in table
    ratios = f"{r['sdpa_ms']:.3f} | {r['shear_then_sdpa_over_sdpa']:.3f} | {r['fused_over_sdpa']:.3f}"
    assert f"| {shape} | forward | {ratios} | 2.000 |" in table  # this check had no gamma 0 column
    assert "backward variants" not in table  # a check without --backward-variants
    for row in check["fused_kernel"].values():
        row["backward_variant_gradient_gap"] = {"fused_atomic_dq": 0.004}
        row["forward+backward"].update(fused_atomic_dq_over_fused=0.8, fused_atomic_dq_over_sdpa=1.2)
    assert f"| {shape} | `atomic_dq` | 0.800 | 1.200 | 0.004 |" in gpu_tables.fused_kernel_table(check)


TINY_SHAPE = ["--batch", "1", "--heads", "1", "--length", "8", "--head-dim", "4"]


@pytest.mark.parametrize("script, args, message", [
    ("attention_speed", [*TINY_SHAPE, "--repeats", "0"], "argument --repeats: expected a positive integer, got 0"),
    ("attention_speed", ["--length", "0"], "argument --length: expected a positive integer, got 0"),
    ("attention_speed", [*TINY_SHAPE, "--repeats", "1", "--threads", "0"], "argument --threads: expected a positive integer"),
    pytest.param("attention_speed", [*TINY_SHAPE, "--repeats", "1", "--device", "cuda"], "needs a CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")),
    ("attention_speed", [*TINY_SHAPE, "--repeats", "1", "--device", "gpu"], "--device must be cpu or cuda, got 'gpu'"),
    ("trainer_speed", ["--steps", "1"], "--steps must be at least 2"),
    ("trainer_speed", ["--steps", "2", "--repeats", "0"], "argument --repeats: expected a positive integer, got 0"),
    ("gpu_tables", ["no-such-folder"], "no-such-folder holds no gpu_check.json"),
    ("step_overhead", ["--table", "no-such-run.json", "no-such-run.json"], "no saved run no-such-run.json"),
    ("step_overhead", ["--decode-table", "no-such-run.json"], "no saved run no-such-run.json"),
    ("step_overhead", ["--device", "bogus"], "--device must be cpu or cuda, got 'bogus'"),
    pytest.param("hf_decode_speed", ["--types", "lama"], "no model type lama; the types are", marks=pytest.mark.slow),
    pytest.param("hf_decode_speed", ["--types", "olmo_hybrid", "--length", "4", "--batch", "1", "--repeats", "1"],
                 "olmo_hybrid's linear-attention cache cannot be cropped back", marks=pytest.mark.slow),
])
def test_the_benchmarks_refuse_bad_arguments_in_one_line(script, args, message, monkeypatch, capsys):
    """A bad argument is one argparse error line, before anything is built or timed: it was a traceback
    (an empty median, a reshape of nothing, torch without CUDA, a missing file, a KeyError)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *args])
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as exited:
            _script(script).main()
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err.splitlines()[-1] and "Traceback" not in err


@pytest.mark.parametrize("script, args", [
    ("bf16_error_budget", ["--smoke", "--rows", "8", "--out"]),
    ("attention_speed", [*TINY_SHAPE, "--repeats", "1", "--decode-only", "--json"]),
])
def test_a_run_writes_its_json_into_a_folder_not_made_yet(script, args, tmp_path, monkeypatch, capsys):
    """The file of a finished run is written, its folder made (as step_overhead.py and gpu_check.py make theirs):
    the run was computed whole, then lost to a FileNotFoundError."""
    out = tmp_path / "2026-12-06" / "run.json"
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *args, str(out)])
    threads = torch.get_num_threads()
    try:
        _script(script).main()
    finally:
        torch.set_num_threads(threads)
    saved = json.loads(out.read_text())
    assert saved["git"] and ("shapes" in saved or "ratios" in saved) and capsys.readouterr().out


def test_the_step_overhead_table_sets_each_row_beside_the_same_presets_row_of_the_run_before():
    """Runs of other ``--presets`` orders: psa-4m fp32 was set beside psa-92m's ratio before (1.161 for 1.192),
    the rows paired by position; a row the run before lacks is refused."""
    step_overhead = _script("step_overhead")
    folder = ROOT / "docs" / "results" / "cpu" / "step_overhead"
    after, before = (json.loads((folder / name).read_text()) for name in ("2026-12-06.json", "2026-12-06-ops-of-9dbc32a.json"))
    swapped = dict(before, rows=before["rows"][2:] + before["rows"][:2])  # as --presets psa-92m psa-4m saves them
    assert step_overhead.page_table(after, swapped) == step_overhead.page_table(after, before)
    with pytest.raises(ValueError, match="the run before has no row psa-4m, fp32; psa-4m, bf16 autocast"):
        step_overhead.page_table(after, dict(before, rows=before["rows"][2:]))



def test_meanfield_speed_gives_numpy_the_threads_torch_gets():
    """NumPy's BLAS threads follow ``--threads`` however the parser is given it: ``--threads=2`` and ``--thr 3``
    left NumPy at one thread while torch took more (the torch/NumPy ratio compared 2 threads with 1)."""
    code = """if True:
        import json, os, runpy, sys
        blas = []
        for argv in (["--threads=2"], ["--thr", "3", "--quick"], ["--threads", "2"], ["--quick"]):
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.pop(var, None)
            sys.argv = ["meanfield_speed.py", *argv, "--help"]  # the threads are set before the parser runs
            try:
                runpy.run_path("benchmarks/meanfield_speed.py", run_name="__main__")
            except SystemExit:
                pass
            blas.append(os.environ["OPENBLAS_NUM_THREADS"])
        print(json.dumps(blas))"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT / "src")])})
    assert json.loads(done.stdout.splitlines()[-1]) == ["2", "3", "2", "1"], done.stderr[-2000:]


def test_meanfield_speed_times_the_papers_runs_interleaved(monkeypatch):
    """Section 3 runs the kernels interleaved after an untimed round (every other round in reverse order) and takes
    medians, as the script's docstring says its calls are: it ran each kernel once, in order, so the baseline (USA)
    alone ran first and cold."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    meanfield_speed = _script("meanfield_speed")
    calls = []

    def fake_simulate(cfg):
        calls.append(cfg.kernel.name)
        return type("Trajectory", (), {"times": torch.zeros(11)})()

    monkeypatch.setattr(meanfield_speed, "simulate", fake_simulate)
    rows = meanfield_speed.paper_rows(16)
    kernels = [row["kernel"] for row in rows]
    assert kernels[0] == "usa" and calls == kernels * 2 + kernels[::-1] + kernels and rows[0]["ratio_to_usa"] == 1.0
    assert all(row["steps"] == 10 and row["seconds"] > 0 for row in rows)


def test_meanfield_speed_writes_its_json_with_its_date_into_a_folder_not_made_yet(tmp_path, monkeypatch, capsys):
    """``--json`` into a folder not made yet: the finished run was lost to a FileNotFoundError; and the file now
    says when, where and at which revision it was measured (it held the threads and rows alone)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    meanfield_speed = _script("meanfield_speed")
    for section in ("euler_rows", "comoving_rows", "paper_rows"):  # the sections' minutes are not what is tested
        monkeypatch.setattr(meanfield_speed, section, lambda *args, **kwargs: [])
    out = tmp_path / "2026-12-06" / "meanfield.json"
    monkeypatch.setattr(sys, "argv", ["meanfield_speed.py", "--json", str(out)])
    threads = torch.get_num_threads()
    try:
        meanfield_speed.main()
    finally:
        torch.set_num_threads(threads)
    saved = json.loads(out.read_text())
    assert saved["threads"] == 1 and saved["date"] and saved["git"] and saved["machine"] and saved["paper"] == []


def test_the_recipe_prose_in_the_docs_is_what_the_saved_recipes_give():
    """docs/text.md's sentences on the recipes, read off their saved histories (which keep each layer's best head
    only: the page said the second layer keeps "all its heads" on the previous token where no saved result shows it)."""
    saved = ROOT / "docs" / "results" / "two_layer_recipes"

    def history(name):
        return {r["step"]: r for r in json.loads((saved / f"{name}.json").read_text())["history"]}

    def at(h, step, key, layer):
        return round(h[step][key][layer], 2)

    second = history("mlp-layer-2-only-b64")
    assert at(second, 200, "previous_token", 1) == 0.90 and round(second[400]["accuracy"], 2) == 0.10
    assert (at(second, 500, "previous_token", 0), at(second, 500, "induction", 1), round(second[500]["accuracy"], 2)) \
        == (0.71, 0.73, 0.93)
    locked = [history(name) for name in ("mlp-layer-1-only-b64", "default-b64", "default-b64-6000-steps")]
    assert {at(h, max(h), "previous_token", 1) for h in locked[:2]} == {1.00}
    assert {at(h, s, "previous_token", 0) for h in locked for s in h if s} <= {0.07, 0.08}
    long = locked[2]
    assert (round(long[1000]["accuracy"], 2), round(long[6000]["accuracy"], 2)) == (0.09, 0.11)
    assert at(history("layer-1-norm-bias-b64"), 1500, "previous_token", 1) == 0.64
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    for claim in ("the second layer's heads first turn towards the previous token (0.90 at step 200)",
                  "the first layer takes that role (0.71) and the second forms induction heads (0.73), and accuracy "
                  "jumps from 0.10 to 0.93", "keeps its heads on the previous token (its best at 1.00; all four, above, "
                  "with MLPs in both) and the first stays uniform (0.07–0.08)",
                  "(accuracy 0.09 at step 1,000, 0.11 at 6,000)", "only weakens the second layer's lock (0.64)"):
        assert claim in page, claim
