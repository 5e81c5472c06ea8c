import contextlib
import io
import json
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("executorch")

from helpers import check_bad_inputs_are_refused, shared  # noqa: E402
from psattn import AttentionConfig, DecoderLM, ModelConfig  # noqa: E402
from psattn.cli import main  # noqa: E402
from psattn.export.executorch import ExecuTorchLM, export_executorch, quantized_copy  # noqa: E402
from psattn.models import generate  # noqa: E402
from psattn.training.run_dir import load_trained  # noqa: E402

pytestmark = pytest.mark.slow  # each program takes tens of seconds to lower


def float_model():
    """Two symmetric layers (the cache keeps the last raw key and query), GQA, weights large enough
    that the logits depend strongly on the input."""
    config = ModelConfig(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                         attention=AttentionConfig("symmetric", 0.8))
    torch.manual_seed(0)
    model = DecoderLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    return model


def float_program_file(tmp_path_factory):
    """``float_model()``'s program (up to 24 tokens), lowered once per test session."""
    folder = shared(tmp_path_factory, "executorch-float-model",
                    lambda f: export_executorch(float_model(), f / "m.pte", max_context=24))
    return folder / "m.pte"


def _export_command(folder, run, *flags):
    """``psattn export --format executorch`` of ``run`` to ``folder/model.pte`` with ``flags``: its JSON goes to
    ``folder/r.json`` and the lines it printed to ``folder/out.txt``."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["export", "--format", "executorch", "--run-dir", str(run), "--out", str(folder / "model.pte"),
                     "--json", str(folder / "r.json"), *flags]) == 0
    (folder / "out.txt").write_text(printed.getvalue())


@pytest.fixture(scope="session")
def tiny_run_programs(tmp_path_factory, tiny_run):
    """``tiny_run`` (rows of 16 tokens) exported by ``psattn export --format executorch`` once per session
    (``_export_command``)."""
    return shared(tmp_path_factory, "tiny-run-executorch", lambda folder: _export_command(folder, tiny_run))


@pytest.fixture(scope="session")
def induction_programs(tmp_path_factory, induction_run):
    """``induction_run`` exported by ``psattn export --format executorch --quantize int8 int4 --external-weights``
    once per session (``_export_command``): three programs, each with its weights in a ``.ptd`` beside it."""
    return shared(tmp_path_factory, "induction-run-executorch", lambda folder: _export_command(
        folder, induction_run, "--quantize", "int8", "int4", "--external-weights"))


@pytest.fixture(scope="module")
def float_program(tmp_path_factory):
    """``float_model()`` and its program, for the tests that run it."""
    return float_model(), ExecuTorchLM(float_program_file(tmp_path_factory))


def test_prefill_and_cached_decode_equal_pytorch(tmp_path, float_program):
    model, program = float_program
    assert program.max_context == 24
    ids = torch.randint(0, 37, (3, 13))
    with torch.no_grad():
        assert np.abs(program.logits(ids.numpy()) - model(ids).numpy()).max() < 1e-4
        assert np.abs(program.logits(ids[:, :1].numpy()) - model(ids[:, :1]).numpy()).max() < 1e-4  # one token
    prompt = ids[:, :5]
    ours = generate(model, prompt, 12)
    seqs, step_logits = program.generate(prompt.numpy(), 12)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4  # every decode step, the cache as explicit state
    assert (seqs == ours.sequences.numpy()).all()
    with pytest.raises(ValueError, match="plans memory for 24 tokens; 25 asked"):
        program.logits(torch.zeros(1, 25, dtype=torch.long).numpy())
    with pytest.raises(ValueError, match="at least 2 tokens"):
        export_executorch(model, tmp_path / "n.pte", max_context=1)


def test_an_fp32_program_holds_a_tied_embedding_table_twice(tmp_path_factory, float_program):
    """docs/edge.md says so, and why (the lookup runs outside XNNPACK, which keeps its own copy of the head's
    weight): an ExecuTorch that shares the two fails here, and the paragraph must change."""
    model, _ = float_program
    assert model.lm_head.weight is model.embed.weight
    blob = float_program_file(tmp_path_factory).read_bytes()
    assert blob.count(model.embed.weight.detach().numpy().tobytes()) == 2


def test_int4_needs_widths_in_groups_of_32():
    narrow = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
    with pytest.raises(ValueError, match=r"groups of 32 input features; this model has linear layers \[16\] wide"):
        quantized_copy(narrow, "int4")
    with pytest.raises(ValueError, match="unknown quantization"):
        quantized_copy(narrow, "int2")
    tied = quantized_copy(float_model(), "int8")
    assert tied.embed.weight.dtype == torch.float32  # the embedding table is not quantized with the head


def test_the_int4_copy_keeps_its_scales_in_bfloat16_as_the_program_does():
    """XNNPACK's int4 kernels keep each group's scale in bfloat16; the copy kept float32 scales, so its logits
    were up to 0.05 (1.4% of the largest) away from its program's, which equal those of the copy now (1e-6)."""
    scales = [m.weight.scale for m in quantized_copy(float_model(), "int4").modules() if isinstance(m, torch.nn.Linear)]
    assert len(scales) == 2 * 4 + 2 * 2 + 1  # q, k, v, o and the MLP's two of each layer, and the head
    assert all(torch.equal(s, s.to(torch.bfloat16).float()) for s in scales)


def test_export_command_measures_fp32_int8_and_int4_programs(induction_programs):
    r = json.loads((induction_programs / "r.json").read_text())
    assert sorted(p.name for p in induction_programs.iterdir()) == [
        "model.int4.ptd", "model.int4.pte", "model.int8.ptd", "model.int8.pte", "model.ptd", "model.pte", "out.txt", "r.json"]
    assert r["max_logit_error"]["full_forward"] < 1e-4 and r["max_logit_error"]["decode_steps"] < 1e-4
    assert r["greedy_tokens_equal"]
    acc = r["accuracy"]
    assert acc["pytorch"] > 0.5 and acc["executorch_fp32"] == pytest.approx(acc["pytorch"], abs=1e-3)
    int8, int4 = r["quantized"]["int8"]["teacher_forced"], r["quantized"]["int4"]["teacher_forced"]
    assert int8["positions"] == 64 * 64 and int8["top1_agreement"] >= 0.9 and 0 <= int8["kl_nats"] < 0.05
    assert int4["top1_agreement"] >= 0.8 and int4["kl_nats"] >= int8["kl_nats"]  # fewer bits, further from fp32
    assert abs(acc["executorch_int8"] - acc["pytorch"]) <= 0.02
    sizes = r["size_bytes"]
    assert sizes["int4"] < sizes["int8"] < 0.5 * sizes["fp32"]
    assert set(r["latency_ms_per_token"]) == {"pytorch", "executorch_fp32", "executorch_int8", "executorch_int4"}


def test_a_run_of_short_rows_exports_and_times_its_decode_within_them(tiny_run_programs):
    """Rows of 16 tokens: the timed decode asked for 24 new tokens after a negative-length prompt, and the
    export failed ("plans memory for 16 tokens; 31 asked") after lowering the program."""
    r = json.loads((tiny_run_programs / "r.json").read_text())
    assert r["max_context"] == 16 and r["greedy_tokens_equal"]
    assert set(r["latency_ms_per_token"]) == {"pytorch", "executorch_fp32"}
    assert "data_files" not in r and sorted(p.name for p in tiny_run_programs.iterdir()) == \
        ["model.pte", "out.txt", "r.json"]


def test_external_weights_hold_a_tied_table_once_and_run_as_pytorch_does(induction_run, induction_programs):
    """--external-weights writes each program's weights to a .ptd beside its .pte, the tied embedding table once
    (a one-file program holds it twice: docs/edge.md, and the test above); the command counts both files, and
    each program gives PyTorch's logits and greedy tokens, its quantized ones too."""
    folder = induction_programs
    model = load_trained(induction_run)
    table = model.embed.weight.detach().numpy().tobytes()  # fp32 in every program: only linear layers are quantized
    assert [(folder / name).read_bytes().count(table) for name in ("model.pte", "model.ptd", "model.int8.pte",
                                                                    "model.int8.ptd", "model.int4.ptd")] == [0, 1, 0, 1, 1]
    r = json.loads((folder / "r.json").read_text())
    assert r["data_files"] == {q: str(folder / f"model{suffix}.ptd") for q, suffix in
                               (("fp32", ""), ("int8", ".int8"), ("int4", ".int4"))}
    for q, suffix in (("fp32", ""), ("int8", ".int8"), ("int4", ".int4")):
        pte, ptd = folder / f"model{suffix}.pte", folder / f"model{suffix}.ptd"
        assert r["size_bytes"][q] == pte.stat().st_size + ptd.stat().st_size
        assert r["data_size_bytes"][q] == ptd.stat().st_size
    printed = (folder / "out.txt").read_text()
    assert f"{folder / 'model.pte'} with its weights in {folder / 'model.ptd'}" in printed
    assert "size (.pte + .ptd): fp32 " in printed and " MB (.ptd " in printed
    external = ExecuTorchLM(folder / "model.pte")
    assert external.data_path == folder / "model.ptd"
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 64, (2, 16)))
    with torch.no_grad():
        assert np.abs(external.logits(ids.numpy()) - model(ids).numpy()).max() < 1e-4
    seqs, step_logits = external.generate(ids[:, :4].numpy(), 12)
    ours = generate(model, ids[:, :4], 12)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4 and (seqs == ours.sequences.numpy()).all()


def test_a_program_and_its_weights_file_land_as_a_set(tmp_path, monkeypatch):
    """export_executorch wrote the new weights file over the earlier one, then the program: a failure between the two
    (a full disk, most often) left the earlier program reading the new weights by name. Now both are written in a
    staging folder and moved in together; an export without external weights removes an earlier one's .ptd.
    (The writer is replaced by one that writes the two files as the real one does, without minutes of lowering.)"""
    import errno

    from psattn.export import executorch

    model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
    (tmp_path / "m.pte").write_bytes(b"earlier program")
    (tmp_path / "m.ptd").write_bytes(b"earlier weights")

    def weights_then_full(model, path, *, max_context, quantize, external_weights):
        executorch.data_path_for(path).write_bytes(b"new weights")
        raise OSError(errno.ENOSPC, "No space left on device")

    def program_alone(model, path, *, max_context, quantize, external_weights):
        path.write_bytes(b"new program")
        return path

    monkeypatch.setattr(executorch, "write_executorch_files", weights_then_full)
    with pytest.raises(OSError, match="Is the disk full"):
        export_executorch(model, tmp_path / "m.pte", max_context=8, external_weights=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"m.pte": b"earlier program",
                                                                    "m.ptd": b"earlier weights"}
    monkeypatch.setattr(executorch, "write_executorch_files", program_alone)
    assert export_executorch(model, tmp_path / "m.pte", max_context=8) == tmp_path / "m.pte"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"m.pte": b"new program"}


def test_a_program_without_its_weights_file_is_refused_in_one_line(tmp_path, induction_programs):
    """The runtime said only "Failed to load method prefill, error: 0x:2"; a pair renamed together still loads."""
    shutil.copy(induction_programs / "model.pte", tmp_path / "m.pte")
    with pytest.raises(FileNotFoundError, match=f"did not load without a weights file beside it, and "
                                                f"{tmp_path / 'm.ptd'} is missing"):
        ExecuTorchLM(tmp_path / "m.pte")
    shutil.copy(induction_programs / "model.pte", tmp_path / "renamed.pte")
    shutil.copy(induction_programs / "model.ptd", tmp_path / "renamed.ptd")
    assert ExecuTorchLM(tmp_path / "renamed.pte").logits(np.array([[1, 2, 3]])).shape == (1, 3, 64)


@pytest.mark.parametrize("max_context", [2])
def test_a_short_context_exports_and_fills_it(tmp_path, max_context):
    """The export traced a 5-token example prompt, outside a plan of fewer tokens, and a plan of 2 tokens
    made the cache length a dimension from 1 to 1: every max_context from 2 to 5 failed to export. A plan of 2
    fails on either; longer plans are exported by the other tests (16 and 24 tokens). The model is float64, the
    other dtype docs/exported.md says export_executorch takes, which no test exported."""
    model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_heads=2, n_kv_heads=1,
                                  attention=AttentionConfig("symmetric", -0.5, boundary="zero"))).double().eval()
    program = ExecuTorchLM(export_executorch(model, tmp_path / "m.pte", max_context=max_context))
    ids = torch.randint(0, 16, (2, max_context))
    with torch.no_grad():
        assert np.abs(program.logits(ids.numpy()) - model(ids).numpy()).max() < 1e-4  # the whole plan in one prefill
    ours = generate(model, ids[:, :1], max_context)  # one token, then decode steps up to the plan's end
    seqs, step_logits = program.generate(ids[:, :1].numpy(), max_context)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4 and (seqs == ours.sequences.numpy()).all()


def test_an_empty_batch_decodes_to_empty_rows_as_pytorch_does(float_program):
    """A batch of no rows: logits gave (0, T, V), while generate failed in NumPy ("need at least one array to stack")."""
    model, program = float_program
    seqs, logits = program.generate(np.zeros((0, 5), dtype=np.int64), 3)
    assert seqs.shape == generate(model, torch.zeros(0, 5, dtype=torch.long), 3).sequences.shape == (0, 8)
    assert logits.shape == (0, 3, 37) and program.logits(np.zeros((0, 5), dtype=np.int64)).shape == (0, 5, 37)


def test_bad_token_ids_are_refused_in_one_line(float_program):
    """Out-of-range ids stopped the program with "error 0x12", fractional ones were truncated, and an empty
    prompt aborted the process."""
    model, program = float_program
    assert program.vocab_size == 37
    check_bad_inputs_are_refused(program, model)
    with pytest.raises(ValueError, match="plans memory for 24 tokens; 25 asked"):
        program.generate(np.zeros((1, 25), dtype=np.int64), 0)  # a prompt longer than the plan, with no new token


def test_a_bf16_model_is_refused_before_anything_is_written(tmp_path):
    model = DecoderLM(ModelConfig(vocab_size=29, d_model=16, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
    with pytest.raises(ValueError, match="ExecuTorch's portable runtime runs these graphs in float32 or float64"):
        export_executorch(model.to(torch.bfloat16), tmp_path / "m.pte", max_context=8)  # it failed inside ExecuTorchLM
    assert not (tmp_path / "m.pte").exists()


def test_a_model_it_cannot_export_is_refused_before_a_folder_is_made(tmp_path):
    key_lag = DecoderLM(ModelConfig(vocab_size=29, d_model=32, n_heads=2, attention=AttentionConfig("canon")))
    with pytest.raises(ValueError, match="key-lag"):
        export_executorch(key_lag, tmp_path / "new" / "m.pte", max_context=8)
    narrow = DecoderLM(ModelConfig(vocab_size=29, d_model=16, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
    with pytest.raises(ValueError, match="int4 weights take groups of 32"):
        export_executorch(narrow, tmp_path / "new" / "m.pte", max_context=8, quantize="int4")
    assert list(tmp_path.iterdir()) == []  # the folders to hold the program were made before the refusal


def test_int4_of_a_narrow_run_is_refused_before_anything_is_exported(tmp_path, monkeypatch):
    """--quantize int4 of a model 48 wide was refused only after the fp32 program was lowered and compared
    (38 s on a 2-core machine); now before any export."""
    import dataclasses

    from helpers import tiny_config
    from psattn.export import compare_executorch
    from psattn.training.trainer import train

    config = tiny_config(1)
    train(dataclasses.replace(config, model=dataclasses.replace(config.model, d_model=48)), tmp_path / "run")

    def exported(*args, **kwargs):
        raise AssertionError("a program was exported before the refusal")

    monkeypatch.setattr(compare_executorch, "write_executorch_files", exported)
    with pytest.raises(ValueError, match=r"int4 weights take groups of 32 input features; this model has linear layers \[48\]"):
        compare_executorch.executorch_and_compare(tmp_path / "run", tmp_path / "m.pte", quantize=("int8", "int4"))
    assert list(tmp_path.iterdir()) == [tmp_path / "run"]
