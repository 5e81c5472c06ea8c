"""INT8 one group of MatMuls at a time: every MatMul lands in one group, and each row measures a real change."""

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from psattn.export.int8_ablation import WHOLE, format_ablation, int8_ablation  # noqa: E402
from psattn.export.quantize import EMBEDDING, MIXING, SCORES  # noqa: E402


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_each_group_is_quantized_alone_and_the_whole_model_is_what_export_writes(tmp_path, tiny_run, mode):
    # tiny_run: one layer with an MLP, tied embeddings
    rows = {r["group"]: r for r in int8_ablation(tiny_run, tmp_path / "onnx", mode=mode, rows=32, prompts=4,
                                                 decode_tokens=4)}
    groups = ["q projection", "k projection", "v projection", SCORES, MIXING, "output projection", "MLP up", "MLP down",
              "LM head"]
    assert set(rows) == {*groups, EMBEDDING, "every MatMul", "every MatMul but the LM head", WHOLE}
    assert rows["every MatMul"]["nodes"] == sum(rows[g]["nodes"] for g in groups) == 9
    assert rows["every MatMul but the LM head"]["nodes"] == 8 and rows[EMBEDDING]["nodes"] == 1
    if mode == "static":  # static INT8 quantizes MatMuls only; the embedding untouched
        assert rows[EMBEDDING]["kl_nats"] == 0
    else:  # dynamic INT8 also quantizes the embedding's Gather
        assert rows[EMBEDDING]["kl_nats"] > 0
    for group in ("q projection", "v projection", "MLP up", "every MatMul"):  # weights in INT8: the logits move
        assert rows[group]["kl_nats"] > 0 and 0.5 < rows[group]["top1_agreement"] <= 1.0, group
    untouched = [SCORES, MIXING] if mode == "dynamic" else []  # dynamic INT8 needs a stored weight
    for group in untouched:
        assert rows[group]["kl_nats"] == 0 and rows[group]["top1_agreement"] == 1.0, group
    if mode == "static":
        assert rows[SCORES]["kl_nats"] > 0 and rows["LM head"]["kl_nats"] > 0
    lines = format_ablation(list(rows.values()))
    assert lines[0].startswith("| INT8 group | nodes |") and len(lines) == 2 + len(rows)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_int8_as_exported_keeps_the_value_and_sheared_key_projections_in_fp32(int8_export, mode):
    import onnx

    from psattn.export.quantize import fp32_nodes, matmul_groups
    from psattn.training.run_dir import load_trained

    run, r = int8_export(mode)  # one key-only layer, exported with --int8 mode
    model = load_trained(run)
    for fp32, int8 in ((r["files"]["prefill"], r["files"]["prefill_int8"]), (r["files"]["decode"], r["files"]["decode_int8"])):
        groups = matmul_groups(fp32, model)
        kept = fp32_nodes(fp32, model)
        assert sorted(kept) == sorted(groups["v projection"] + groups["k projection"]) and len(kept) == 2
        nodes = onnx.load(int8).graph.node
        if mode == "dynamic":
            matmuls = {n.name for n in nodes if n.op_type == "MatMul"}  # a quantized one is replaced
            assert set(kept) <= matmuls and groups["q projection"][0] not in matmuls
            assert "MatMulInteger" in {n.op_type for n in nodes}
        else:  # static: a QDQ graph, node names kept; INT8 operands come through DequantizeLinear
            dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
            inputs = {n.name: n.input for n in nodes if n.op_type == "MatMul"}
            for fp32_weight in (*kept, groups["LM head"][0]):  # (their input is shared with q: INT8)
                assert inputs[fp32_weight][1] not in dequantized
            assert set(inputs[groups["q projection"][0]]) <= dequantized and set(inputs[groups[MIXING][0]]) <= dequantized


def test_only_layers_that_shear_their_keys_keep_the_key_projection_in_fp32(onnx_export):
    """Two-layer models of each kind (the exports test_onnx.py's runtime tests read)."""
    from psattn.export.quantize import fp32_nodes, matmul_weights

    for variant, kept in (("baseline", {"v_proj"}), ("query_only", {"v_proj"}), ("symmetric", {"v_proj", "k_proj"})):
        model, paths = onnx_export(variant)
        names = matmul_weights(paths.prefill, model)
        assert {names[n].split(".")[3] for n in fp32_nodes(paths.prefill, model)} == kept
        assert len(fp32_nodes(paths.prefill, model)) == 2 * len(kept)  # both layers
