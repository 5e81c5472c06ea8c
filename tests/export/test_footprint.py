"""psattn footprint: the computed weight and cache bytes are what real tensors and caches hold."""

import json

import pytest

from helpers import tiny_config
from psattn.cli import main
from psattn.export.footprint import INT4_GROUP, footprint, measured_cache_bytes, weight_bytes
from psattn.models import AttentionConfig, DecoderLM, ModelConfig
from psattn.training.trainer import train


@pytest.mark.parametrize("variant,gamma", [("baseline", 0.0), ("key_only", 1.0), ("symmetric", 0.5), ("query_only", 1.0)])
@pytest.mark.parametrize("n_kv_heads,layers", [(4, 1), (2, 2)])
def test_computed_cache_bytes_equal_a_filled_cache(variant, gamma, n_kv_heads, layers):
    model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, n_layers=layers,
                                  attention=AttentionConfig(variant, gamma)))
    for context in (1, 7, 33):
        assert footprint(model, context).cache_bytes == measured_cache_bytes(model, context)
    f = footprint(model, 10)
    assert (f.cache_fixed_bytes == 0) == (variant == "baseline")


def test_weight_bytes_count_tied_weights_once_and_follow_the_stated_layouts():
    model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_heads=4))
    w = weight_bytes(model)
    assert model.lm_head.weight.data_ptr() == model.embed.weight.data_ptr()  # tied: stored once
    storages = {t.data_ptr(): t.numel() for t in model.state_dict().values() if t.is_floating_point() and t.dim() >= 1
                and not any(t.data_ptr() == b.data_ptr() for b in model.buffers())}
    assert w["fp32"] == 4 * sum(storages.values()) == 4 * model.num_parameters()
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = sum(p.numel() for p in model.parameters() if p.dim() < 2)
    assert w["int8"] == sum(p.numel() + 4 * p.shape[0] for p in matrices) + 4 * vectors
    int4 = sum(p.shape[0] * ((p[0].numel() + 1) // 2) + 4 * p.shape[0] * -(-p[0].numel() // INT4_GROUP) for p in matrices)
    assert w["int4"] == int4 + 4 * vectors and w["int4"] < w["int8"] < w["fp32"]


def test_the_footprint_command_prints_a_table_and_the_budgets(tmp_path, capsys):
    train(tiny_config(2), tmp_path / "run")
    assert main(["footprint", str(tmp_path / "run"), "--context", "64", "--json", str(tmp_path / "f.json")]) == 0
    out = capsys.readouterr().out
    assert "| run (1 layer, key_only γ=1) |" in out and "fits:" in out
    data = json.loads((tmp_path / "f.json").read_text())["run (1 layer, key_only γ=1)"]
    assert data["context"] == 64 and data["ram_bytes"] == data["cache_bytes"] + data["decode_step_bytes"]
    assert data["fits"]["256 KB SRAM"] == (data["ram_bytes"] <= 256 * 1024)
