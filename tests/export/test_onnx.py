import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from helpers import check_bad_inputs_are_refused, random_model
from psattn.experiments.configs import small_config
from psattn.export import OnnxLM, export_onnx, nonstandard_ops
from psattn.export.compare import export_and_compare, format_comparison, key_range_growth, onnx_family
from psattn.export.onnx import OnnxPaths, data_path_for, decode_path_for, int8_path_for, lm_head_nodes, quantize_int8
from psattn.export.quantize import calibration_inputs, fp32_nodes
from psattn.models import generate
from psattn.models.generate import NonFiniteLogits
from psattn.training.config import RunConfig
from psattn.training.run_dir import eval_batch

CASES = [("baseline", "post_rope"), ("symmetric", "post_rope"), ("key_only", "post_rope"),
         ("query_only", "post_rope"), ("symmetric", "pre_rope")]


def dims(path, name):
    graph = onnx.load(str(path)).graph
    value = next(v for v in list(graph.input) + list(graph.output) if v.name == name)
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("variant,placement", CASES)
def test_onnx_runtime_matches_pytorch(onnx_export, variant, placement):
    model, paths = onnx_export(variant, placement)
    assert nonstandard_ops(paths.prefill) == [] and nonstandard_ops(paths.decode) == []
    runtime = OnnxLM(paths.prefill, paths.decode)
    ids = torch.randint(0, 37, (3, 13))
    with torch.no_grad():
        want = model(ids).numpy()
    assert np.abs(runtime.logits(ids.numpy()) - want).max() < 1e-4
    prompt = ids[:, :5]
    ours = generate(model, prompt, 8)
    seqs, step_logits = runtime.generate(prompt.numpy(), 8)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4  # every decode step
    assert (seqs == ours.sequences.numpy()).all()

    # the decode step's state grows like a plain KV cache: only the cache length is dynamic
    L, Hkv, D = 2, 2, 8
    for name in ("past_keys", "past_values"):
        shape = dims(paths.decode, name)
        assert shape[0] == L and shape[2] == Hkv and shape[4] == D and isinstance(shape[3], str)
    raw_inputs = [i.name for i in onnx.load(str(paths.decode)).graph.input if i.name.startswith("past_last")]
    gamma_q, gamma_k = model.blocks[0].attn.gamma_q, model.blocks[0].attn.gamma_k
    assert raw_inputs == ["past_last_keys"] * (gamma_k != 0) + ["past_last_queries"] * (gamma_q != 0)
    for name in raw_inputs:
        assert dims(paths.decode, name)[3] == 1  # one position, whatever the sequence length


def weight_places(path):
    """Where each initializer of the graph at ``path`` that lives outside it is: {(file, offset, length)}."""
    graph = onnx.load(str(path), load_external_data=False).graph
    places = [{e.key: e.value for e in t.external_data} for t in graph.initializer
              if t.data_location == onnx.TensorProto.EXTERNAL]
    return {(p["location"], int(p["offset"]), int(p["length"])) for p in places}


def test_the_graphs_share_one_copy_of_the_weights_which_a_new_export_to_the_path_leaves_to_open_sessions(tmp_path):
    """Each graph carried its own copy of the weights, so an export cost twice its weights on disk (and ONNX
    Runtime read both copies); now both read one file, and the decode step still decodes as PyTorch does.
    ONNX Runtime maps the weights file into memory: exporting another model to the same path rewrote it in
    place and changed the weights under the sessions of the earlier export (an error of 1.9 in its logits).
    (One test: the second export needs a first.)"""
    model, second = (random_model("key_only", d_model=128, std=0.05, seed=seed).float() for seed in (0, 1))
    paths = export_onnx(model, tmp_path / "m.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.decode.onnx", "m.onnx", "m.onnx.data"]
    assert paths.data == tmp_path / "m.onnx.data"
    weights = 4 * model.num_parameters()  # fp32
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 1.1 * weights
    shared = weight_places(paths.prefill)
    assert weight_places(paths.decode) == shared and {place[0] for place in shared} == {"m.onnx.data"}
    runtime = OnnxLM(paths.prefill, paths.decode)
    ids = torch.randint(0, 37, (2, 9))
    ours = generate(model, ids[:, :4], 6)
    seqs, step_logits = runtime.generate(ids[:, :4].numpy(), 6)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4 and (seqs == ours.sequences.numpy()).all()
    with torch.no_grad():
        want = model(ids).numpy()
    assert np.abs(runtime.logits(ids.numpy()) - want).max() < 1e-4
    export_onnx(second, tmp_path / "m.onnx")  # the same path again: the open sessions keep the first's weights
    assert np.abs(runtime.logits(ids.numpy()) - want).max() < 1e-4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.decode.onnx", "m.onnx", "m.onnx.data"]


def test_an_export_that_fails_midway_leaves_the_earlier_one_whole_and_nothing_beside_it(tmp_path, monkeypatch,
                                                                                       onnx_export):
    """export_onnx wrote its files in place, one after the other: a failure as it exported the decode step left the
    new prefill graph beside the earlier decode step, and one as it saved the decode graph against the new weights
    file left the earlier decode graph reading the new weights at offsets of its own. Now the three move in as a
    set: the earlier export is whole, and loads and decodes as before, and nothing else is left beside it."""
    import errno

    from psattn.export import onnx as exporter

    model, earlier = onnx_export("key_only")  # the earlier export, copied to the target's folder
    for path in (earlier.prefill, earlier.decode, earlier.data):
        shutil.copy(path, tmp_path / path.name)
    second = random_model("key_only", d_model=64, std=0.05, seed=1).float()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["m.decode.onnx", "m.onnx", "m.onnx.data"]
    export, save = exporter._export, onnx.save
    full = OSError(errno.ENOSPC, "No space left on device")

    def fails_at_the_decode_step(graph, args, path, dynamic_shapes):
        if Path(path).name == "m.decode.onnx":
            raise full
        export(graph, args, path, dynamic_shapes)

    def fails_at_the_second_shared_graph(proto, path, *args, **kwargs):  # the weights file and m.onnx written
        if Path(path).name == "m.decode.onnx" and any(t.data_location == onnx.TensorProto.EXTERNAL
                                                        for t in proto.graph.initializer):
            raise full
        save(proto, path, *args, **kwargs)

    for module, name, fake in ((exporter, "_export", fails_at_the_decode_step),
                               (onnx, "save", fails_at_the_second_shared_graph)):
        with monkeypatch.context() as patch:
            patch.setattr(module, name, fake)
            with pytest.raises(OSError, match="Is the disk full"):
                export_onnx(second, tmp_path / "m.onnx")
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, fake.__name__
    ids = torch.randint(0, 37, (2, 9))
    seqs, step_logits = OnnxLM(tmp_path / "m.onnx", tmp_path / "m.decode.onnx").generate(ids[:, :4].numpy(), 5)
    ours = generate(model, ids[:, :4], 5)
    assert np.abs(step_logits - ours.logits.numpy()).max() < 1e-4 and (seqs == ours.sequences.numpy()).all()



def test_the_weights_file_keeps_small_tensors_inside_maps_large_ones_at_pages_and_the_graphs_drop_debug_metadata(
        tmp_path):
    """docs/edge.md's "One copy of the weights": initializers of 1 KiB or more move to the weights file, a large
    one starts at a page boundary (where ONNX Runtime maps it), and no node keeps the exporter's stack traces.
    No test held the page to any of the three."""
    from psattn.export.onnx import MAPPED_BYTES, PAGE, SHARED_BYTES

    # 64 KiB projections (128 x 128) and a table of 131 x 128 that is no whole number of pages
    model = random_model("key_only", vocab_size=131, d_model=128, std=0.05).float()
    paths = export_onnx(model, tmp_path / "m.onnx")
    for path in (paths.prefill, paths.decode):
        graph = onnx.load(str(path), load_external_data=False).graph
        inside = [t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
        assert all(onnx.numpy_helper.to_array(t).nbytes < SHARED_BYTES for t in inside)
        assert not [n.name for n in graph.node if n.metadata_props]
        large = [(offset, length) for _, offset, length in weight_places(path) if length >= MAPPED_BYTES]
        assert large and all(offset % PAGE == 0 for offset, _ in large)


def test_a_float16_model_exports_and_decodes_as_pytorch_does(tmp_path):
    """docs/exported.md: export_onnx takes a float16 model as well as a float32 one; only bfloat16 was tested
    (refused), so nothing held the page to the float16 half of the sentence."""
    model = random_model("symmetric", std=0.2).float()
    half = copy.deepcopy(model).half()
    paths = export_onnx(half, tmp_path / "h.onnx")
    runtime = OnnxLM(paths.prefill, paths.decode)
    ids = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(0))
    got = runtime.logits(ids.numpy())
    with torch.no_grad():
        want = model(ids).numpy()
    assert got.dtype == np.float16 and np.abs(got - want).max() < 0.01 * np.abs(want).max()
    seqs, _ = runtime.generate(ids[:, :4].numpy(), 6)
    assert (seqs == generate(half, ids[:, :4], 6).sequences.numpy()).all()

@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_the_int8_graphs_share_one_copy_of_their_quantized_weights(int8_export, mode):
    """psattn export --int8 wrote each quantized weight twice, once in each INT8 graph."""
    _, r = int8_export(mode)
    files = r["files"]
    assert Path(files["data_int8"]).name == f"m.int8-{mode}.onnx.data"
    shared = weight_places(files["prefill_int8"])
    assert shared and weight_places(files["decode_int8"]) == shared
    assert {place[0] for place in shared} == {Path(files["data_int8"]).name}
    assert Path(files["data_int8"]).stat().st_size <= sum(place[2] for place in shared) + 4096 * len(shared)
    assert r["size_bytes"]["int8"] == sum(Path(files[k]).stat().st_size for k in ("prefill_int8", "decode_int8",
                                                                                     "data_int8"))
    assert r["max_logit_error"]["decode_steps"] < 1e-4 and r["greedy_tokens_equal"]


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_tied_embedding_table_is_stored_once_in_every_graph(int8_export, mode):
    """The exporter folded the tied LM head's Transpose of an embedding table of up to 8192 entries into a
    transposed copy of the table, so every graph (and its weights file) held the table twice, and INT8 kept
    the fp32 copy (static) or quantized both (dynamic); a larger table kept one, transposed when loaded."""
    run, r = int8_export(mode)
    model = RunConfig.from_file(run / "config.json").model
    assert model.tie_embeddings
    table = {(model.vocab_size, model.d_model), (model.d_model, model.vocab_size)}
    for graph in ("prefill", "decode", "prefill_int8", "decode_int8"):
        initializers = onnx.load(r["files"][graph], load_external_data=False).graph.initializer
        assert len([t.name for t in initializers if tuple(t.dims) in table]) == 1, graph
    assert r["max_logit_error"]["full_forward"] < 1e-4 and r["max_logit_error"]["decode_steps"] < 1e-4

def test_key_lag_and_mixed_layers_are_refused_before_a_folder_is_made(tmp_path):
    with pytest.raises(ValueError, match="key-lag"):
        export_onnx(random_model("canon", gamma=0.0).float(), tmp_path / "new" / "x.onnx")
    model = random_model("key_only").float()
    model.config.attention = [model.config.attention, type(model.config.attention)("baseline")]
    with pytest.raises(ValueError, match="same attention config"):
        export_onnx(model, tmp_path / "new" / "x.onnx")
    assert list(tmp_path.iterdir()) == []  # the folders to hold the graphs were made before the refusal


def test_exports_to_names_without_onnx_suffix_keep_their_own_companions(tmp_path):
    """--out model.v1 then --out model.v2: each keeps its own decode step and INT8 copies (both used to write
    model.decode.onnx and model.int8-*.onnx, so the second replaced the first's and v1 decoded with v2's model)."""
    assert not set(onnx_family(tmp_path / "model.v1")) & set(onnx_family(tmp_path / "model.v2"))
    assert [p.name for p in onnx_family(tmp_path / "model.onnx")] == [
        "model.onnx", "model.decode.onnx", "model.onnx.data", "model.int8-dynamic.onnx", "model.int8-dynamic.decode.onnx",
        "model.int8-dynamic.onnx.data", "model.int8-static.onnx", "model.int8-static.decode.onnx",
        "model.int8-static.onnx.data"]  # the names of a .onnx target's graphs are as they were; each pair's weights beside it
    assert decode_path_for(tmp_path / "model.v1").name == "model.v1.decode.onnx"
    assert data_path_for(tmp_path / "model.v1").name == "model.v1.onnx.data"
    assert int8_path_for(tmp_path / "model.v1", "static").name == "model.v1.int8-static.onnx"


def test_key_range_growth_respects_the_bound():
    for gamma in (0.25, 1.0, 3.0):
        model = random_model("key_only", gamma=gamma).float()
        for row in key_range_growth(model, torch.randint(0, 37, (4, 20))):
            assert row["measured_bits"] <= row["bound_bits"] + 1e-6
            assert row["bound_bits"] == pytest.approx(np.log2(1 + 2 * gamma))


def test_a_shear_before_rope_is_bounded_one_bit_higher():
    from psattn.ops import RotaryEmbedding, apply_rope, shear

    # a rotation can lower k's largest entry by √2 and raise k̂'s as much: these raw keys, sheared before
    # RoPE (gamma 1), grow the rotated key range by 3.36x, past 1 + 2 gamma = 3
    k = torch.tensor([[[[-1.41, 1.41], [0.41, -1.44]]]])  # (1, 1, 2, 2)
    cos, sin = RotaryEmbedding(2)(torch.arange(2)[None])
    growth = apply_rope(shear(k, 1.0), cos, sin).abs().max() / apply_rope(k, cos, sin).abs().max()
    assert 3.0 < growth.item() <= 6.0
    model = random_model("symmetric", gamma=1.0, placement="pre_rope").float()
    for row in key_range_growth(model, torch.randint(0, 37, (4, 20))):
        assert row["pre_rope"] and row["bound_bits"] == pytest.approx(np.log2(3.0) + 1.0)
        assert row["measured_bits"] <= row["bound_bits"]
    result = {"variant": "symmetric", "gamma": 1.0, "files": {"prefill": "m.onnx", "decode": "m.decode.onnx"},
              "size_bytes": {"fp32": 1e6}, "max_logit_error": {"full_forward": 1e-6, "decode_steps": 1e-6},
              "greedy_tokens_equal": True, "accuracy": {"pytorch": 1.0},
              "latency_ms_per_token": {"pytorch": 1.0, "onnxruntime": 0.5}, "key_range_growth": [row]}
    assert format_comparison(result).endswith("(bound log2(1 + 2 gamma) + 1, the shear before RoPE = 2.58)")


def test_static_int8_quantizes_every_matmul_but_the_lm_head_and_stays_close(tmp_path, onnx_export):
    _, shared = onnx_export("symmetric")
    for path in (shared.prefill, shared.decode, shared.data):  # the quantizer writes beside its source
        shutil.copy(path, tmp_path)
    paths = OnnxPaths(*(tmp_path / path.name for path in (shared.prefill, shared.decode, shared.data)))
    fp32 = OnnxLM(paths.prefill, paths.decode)
    rng = np.random.default_rng(0)
    calibration = [rng.integers(0, 37, (8, 12)) for _ in range(4)]
    feeds = [f for rows in calibration for f in fp32.decode_feeds(rows[:, :6], 3)]
    assert len(feeds) == 12 and set(feeds[0]) == set(fp32.decode_inputs)
    q_prefill = quantize_int8(paths.prefill, tmp_path / "q.onnx", [{"input_ids": rows} for rows in calibration])
    q_decode = quantize_int8(paths.decode, tmp_path / "q.decode.onnx", feeds)
    for source, path in ((paths.prefill, q_prefill), (paths.decode, q_decode)):
        head = lm_head_nodes(source)
        assert len(head) == 1 and lm_head_nodes(path) == head  # the MatMul computing the logits
        nodes = onnx.load(str(path)).graph.node
        dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
        body = {i for n in nodes if n.op_type == "MatMul" and n.name not in head for i in n.input}
        assert body and body <= dequantized  # both operands of every other MatMul come through INT8
        head_inputs = {i for n in nodes if n.name in head for i in n.input}
        assert not head_inputs & dequantized  # the LM head stays fp32
        weights = [onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
                   if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]
        assert weights and all(np.abs(w.astype(int)).max() <= 64 for w in weights)  # 7 bits, as dynamic INT8's
    ids = rng.integers(0, 37, (4, 12))
    want, got = fp32.logits(ids), OnnxLM(q_prefill, q_decode).logits(ids)
    # a random model with 7-bit weights: close on average, and no logit far off
    assert np.abs(got - want).mean() < 0.1 * want.std() and np.abs(got - want).max() < 0.2 * np.abs(want).max()


def test_dynamic_int8_weights_take_7_bits_and_stay_close(tmp_path, onnx_export):
    """With 8-bit weights, ONNX Runtime's dynamic int8 MatMul (uint8 activations times int8 weights) saturates on x86
    CPUs without VNNI (AVX2 only): this random model's largest logit error was 28% of its largest logit, against 8.5%
    with 7-bit weights."""
    model, shared = onnx_export("symmetric")
    for path in (shared.prefill, shared.decode, shared.data):  # the quantizer writes beside its source
        shutil.copy(path, tmp_path)
    paths = OnnxPaths(*(tmp_path / path.name for path in (shared.prefill, shared.decode, shared.data)))
    q_prefill = quantize_int8(paths.prefill, tmp_path / "q.onnx", exclude=fp32_nodes(paths.prefill, model))
    q_decode = quantize_int8(paths.decode, tmp_path / "q.decode.onnx", exclude=fp32_nodes(paths.decode, model))
    for path in (q_prefill, q_decode):
        weights = [onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
                   if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]
        assert weights and all(np.abs(w.astype(int)).max() <= 64 for w in weights)  # 7 bits: [-64, 64]
    ids = np.random.default_rng(0).integers(0, 37, (4, 12))
    want, got = OnnxLM(paths.prefill, paths.decode).logits(ids), OnnxLM(q_prefill, q_decode).logits(ids)
    assert np.abs(got - want).max() < 0.2 * np.abs(want).max()


def test_int8_mode_must_be_known(tmp_path):
    with pytest.raises(ValueError, match="int8 must be one of"):
        export_and_compare(tmp_path, tmp_path / "m.onnx", int8="float8")


def test_calibration_rows_come_from_the_training_split():
    config = small_config("key_only", 1.0)
    held_out = {tuple(row) for row in eval_batch(config).inputs.tolist()}
    calibration = np.concatenate(calibration_inputs(config))
    assert calibration.shape == (128, 64)
    assert not held_out & {tuple(row) for row in calibration.tolist()}


@pytest.mark.slow
def test_fidelity_measures_on_known_logits():
    from psattn.export.metrics import greedy_agreement, teacher_forced_agreement

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
    same = teacher_forced_agreement(logits, logits)
    assert same["top1_agreement"] == 1.0 and same["kl_nats"] == pytest.approx(0.0, abs=1e-12) and same["positions"] == 15
    flat = teacher_forced_agreement(logits, np.zeros_like(logits))  # uniform: KL = log V - entropy
    p = torch.from_numpy(logits).double().softmax(-1)
    expected = float((np.log(7) + (p * p.log()).sum(-1)).mean())
    assert flat["kl_nats"] == pytest.approx(expected)
    assert flat["top1_agreement"] == pytest.approx(float((logits.argmax(-1) == 0).mean()))
    a = np.array([[1, 2, 3, 4], [1, 2, 3, 4]])
    b = np.array([[1, 2, 3, 4], [1, 9, 3, 4]])
    assert greedy_agreement(a, b) == {"tokens_agree": 7 / 8, "prefix_agree": (1 + 1 / 4) / 2, "prompts": 2}


@pytest.mark.parametrize("measure,shapes", [("teacher_forced_agreement", [((3, 5, 7), (1, 5, 7)), ((3, 5, 7), (3, 5, 6)),
                                                                          ((5, 7), (5, 7))]),
                                            ("greedy_agreement", [((2, 4), (1, 4)), ((2, 4), (2, 3)), ((4,), (4,))])])
def test_fidelity_measures_refuse_outputs_of_two_shapes(measure, shapes):
    """A batch of one was broadcast against a batch of three (top-1 agreement 0.5 of one row counted thrice);
    another vocabulary was torch's size error, another length NumPy's broadcast error."""
    from psattn.export import metrics

    for a, b in shapes:
        with pytest.raises(ValueError, match=f"reference and other must be .* of one shape, got {re.escape(str(a))}"):
            getattr(metrics, measure)(np.zeros(a, dtype=np.float32), np.zeros(b, dtype=np.float32))


def test_text_quality_refuses_logits_of_another_shape_than_the_batch():
    """torch's errors named neither: "Expected target size [2, 5], got [2, 6]", "Expected input batch_size (1) to
    match target batch_size (2)", and for (B, T) logits an IndexError."""
    from psattn.export.metrics import text_quality
    from psattn.tasks.batch import TaskBatch

    batch = TaskBatch(torch.zeros(2, 6, dtype=torch.long), torch.ones(2, 6, dtype=torch.long))
    for shape in ((2, 5, 8), (1, 6, 8), (2, 6)):
        message = f"logits must be (B, T, V) = (2, 6, V) for this batch, got shape {shape}"
        with pytest.raises(ValueError, match=re.escape(message)):
            text_quality(np.zeros(shape, dtype=np.float32), batch, np.ones(8, dtype=np.int64))
    assert text_quality(np.zeros((2, 6, 8), dtype=np.float32), batch, np.ones(8, dtype=np.int64))["bits_per_byte"] == \
        pytest.approx(3.0)  # uniform over 8 ids of one byte each: log2 8 bits


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_int8_keeps_induction_accuracy_of_a_trained_model(tmp_path_factory, induction_run, mode):
    run = induction_run  # trained once, exported in both modes
    result = export_and_compare(run, tmp_path_factory.mktemp(mode) / "m.onnx", int8=mode, rows=256)
    acc = result["accuracy"]
    assert acc["pytorch"] > 0.5  # the model has learned induction
    assert acc["onnx_fp32"] == pytest.approx(acc["pytorch"], abs=1e-3)
    assert abs(acc["onnx_int8"] - acc["onnx_fp32"]) <= 0.02  # the stated INT8 margin
    assert result["greedy_tokens_equal"] and result["int8_greedy_tokens_agree"] >= 0.9
    tf = result["int8_teacher_forced"]
    assert tf["positions"] == 256 * 64 and tf["top1_agreement"] >= 0.9 and 0 <= tf["kl_nats"] < 0.05
    assert result["int8_greedy"]["prompts"] == 16 and 0 <= result["int8_greedy"]["prefix_agree"] <= 1
    # static keeps the tied LM head (and so the embedding table) in fp32 beside the value and sheared key projections
    assert result["size_bytes"]["int8"] < (0.5 if mode == "dynamic" else 0.6) * result["size_bytes"]["fp32"]
    assert set(result["latency_ms_per_token"]) == {"pytorch", "onnxruntime", "onnxruntime_int8"}
    printed = format_comparison(result)  # what psattn export --int8 prints: the INT8 files too
    for graph in ("prefill_int8", "decode_int8"):
        assert Path(result["files"][graph]).exists() and result["files"][graph] in printed


def test_the_key_range_lines_count_layers_from_one_as_psattn_eval_does():
    """psattn export said "layer 0" of a one-layer model, psattn eval "layer 1"; every message counts from 1."""
    result = {"variant": "key_only", "gamma": 1.0, "files": {"prefill": "m.onnx", "decode": "m.decode.onnx"},
              "size_bytes": {"fp32": 1e6}, "max_logit_error": {"full_forward": 1e-6, "decode_steps": 1e-6},
              "greedy_tokens_equal": True, "accuracy": {"pytorch": 1.0},
              "latency_ms_per_token": {"pytorch": 1.0, "onnxruntime": 0.5},
              "key_range_growth": [{"layer": 0, "gamma_k": 1.0, "measured_bits": 0.5, "bound_bits": 1.58},
                                   {"layer": 1, "gamma_k": 1.0, "measured_bits": 0.4, "bound_bits": 1.58}]}
    lines = format_comparison(result).splitlines()[-2:]
    assert [line.split(":")[0] for line in lines] == ["  layer 1", "  layer 2"]
    assert lines[0].endswith("(bound log2(1 + 2 gamma) = 1.58)")


def test_the_key_range_bound_of_a_negative_gamma_names_the_formula_it_printed():
    """gamma -0.5 printed "bound log2(1 + 2 gamma) = 0.00", a formula that gives -inf there."""
    model = random_model("key_only", gamma=-0.5).float()
    growth = key_range_growth(model, torch.randint(0, 37, (2, 9)))
    result = {"variant": "key_only", "gamma": -0.5, "files": {"prefill": "m.onnx", "decode": "m.decode.onnx"},
              "size_bytes": {"fp32": 1e6}, "max_logit_error": {"full_forward": 1e-6, "decode_steps": 1e-6},
              "greedy_tokens_equal": True, "accuracy": {"pytorch": 1.0},
              "latency_ms_per_token": {"pytorch": 1.0, "onnxruntime": 0.5}, "key_range_growth": growth}
    assert format_comparison(result).splitlines()[-1].endswith("(bound log2(|1 + gamma| + |gamma|) = 0.00)")


EXPORT_IN_A_FRESH_PROCESS = """
import sys
from pathlib import Path
from psattn import AttentionConfig, DecoderLM, ModelConfig
from psattn.export import export_onnx
model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
export_onnx(model, sys.argv[1])
"""


def test_export_prints_no_exporter_warnings(tmp_path):
    """The first export of a process registers the exporter's operators; without torchvision that
    logs one warning per torchvision operator, which the export holds back."""
    run = subprocess.run([sys.executable, "-c", EXPORT_IN_A_FRESH_PROCESS, str(tmp_path / "m.onnx")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "m.onnx").exists()
    assert "torchvision" not in run.stderr and "Skipping" not in run.stderr, run.stderr


def test_onnx_runtime_refuses_bad_token_ids_in_one_line(onnx_export):
    model, paths = onnx_export("symmetric")
    check_bad_inputs_are_refused(OnnxLM(paths.prefill, paths.decode), model)


def test_an_export_leaves_the_callers_model_and_random_state_and_nan_logits_choose_no_token(tmp_path):
    """Exporting put the caller's model in eval mode (dropout then stayed off in the training that followed)
    and drew its example prompt from PyTorch's global generator. A model whose logits are NaN exports, and its
    graphs' greedy decoding refuses to choose a token (argmax chose token 0). (One test, one export of a model
    that is both.) A bfloat16 model, which the runtime cannot run, is refused before anything is written."""
    model = random_model("symmetric", vocab_size=29, dropout=0.1).float().train()
    with pytest.raises(ValueError, match="ONNX Runtime runs these graphs in float32 or float16, not bfloat16"):
        export_onnx(copy.deepcopy(model).to(torch.bfloat16), tmp_path / "bf16.onnx")  # it failed inside the runtime
    assert not (tmp_path / "bf16.onnx").exists()
    model.blocks[0].eval()  # a mixed mode survives too
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    torch.manual_seed(1)
    paths = export_onnx(model, tmp_path / "nan.onnx")
    after_export = torch.rand(3)
    torch.manual_seed(1)
    assert torch.equal(after_export, torch.rand(3))
    assert model.training and not model.blocks[0].training and model.blocks[1].training
    with pytest.raises(NonFiniteLogits, match="NaN or infinite logits"):  # argmax chose token 0
        OnnxLM(paths.prefill, paths.decode).generate(np.array([[1, 2]]), 3)


def test_a_stop_signal_as_the_weights_file_is_renamed_into_place_leaves_no_file_beside_it(tmp_path):
    """export_onnx wrote the shared weights to a visible ``NAME.onnx.data.new`` and renamed it into place: SIGTERM
    (or a failed write) before the rename left that file beside the export for good. The three files are now
    staged as a set: a stop before they are in place leaves nothing of the new export."""
    import signal

    script = tmp_path / "export.py"
    script.write_text("""
import os, signal, sys
from psattn import AttentionConfig, DecoderLM, ModelConfig
from psattn.export import export_onnx

signal.signal(signal.SIGTERM, signal.SIG_DFL)
replace = os.replace

def stopped_first(src, dst, *args, **kwargs):
    if str(dst).endswith(".onnx.data"):
        os.kill(os.getpid(), signal.SIGTERM)
    return replace(src, dst, *args, **kwargs)

os.replace = stopped_first
model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
export_onnx(model.eval(), sys.argv[1])
""")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out" / "m.onnx")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]  # ended by the signal, as before
    assert not (tmp_path / "out").exists()  # the staging folder is removed, and the folder made for the export
