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


@pytest.mark.parametrize("context", [0, -1, 2.5, "5", True])
def test_a_context_that_is_not_a_whole_number_of_tokens_is_refused(context):
    """2.5 gave a cache of 768.0 bytes, "5" a TypeError from a comparison; measured_cache_bytes took 0."""
    model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_heads=4))
    for measure in (footprint, measured_cache_bytes):
        with pytest.raises(ValueError, match="context must be a whole number of tokens, at least 1, got"):
            measure(model, context)


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


def test_runs_in_folders_of_one_name_and_of_other_contexts_each_get_their_row(tmp_path, capsys):
    """a/run and b/run were one row (the second replaced the first), and the header named the first run's
    context for every row."""
    import dataclasses

    short, long = tiny_config(1), tiny_config(1)
    long = dataclasses.replace(long, task=dataclasses.replace(long.task, seq_len=32))
    train(short, tmp_path / "a" / "run")
    train(long, tmp_path / "b" / "run")
    assert main(["footprint", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"),
                 "--json", str(tmp_path / "f.json")]) == 0
    out = capsys.readouterr().out
    assert "KV cache at each run's context (KiB)" in out
    data = json.loads((tmp_path / "f.json").read_text())
    assert sorted(f["context"] for f in data.values()) == [16, 32]
    assert all(name.startswith(str(tmp_path)) for name in data)  # the paths tell the two runs apart
    assert f"| {tmp_path / 'b' / 'run'} (1 layer, key_only γ=1), 32 tokens |" in out


def test_the_measured_decode_loop_memory_grows_with_the_model(tmp_path, capsys):
    """A model with 23 MB more fp32 weights adds at least 90% of that to what a decode process holds beyond its
    runtime (the docstring said ~24 MB and all of it, which the test never asserted)."""
    import dataclasses

    small = tiny_config(1)
    big = dataclasses.replace(small, model=dataclasses.replace(small.model, d_model=1024, n_layers=2, n_heads=8))
    train(small, tmp_path / "small")
    train(big, tmp_path / "big")
    assert main(["footprint", str(tmp_path / "small"), str(tmp_path / "big"), "--context", "16", "--measure",
                 "--json", str(tmp_path / "f.json")]) == 0
    out = capsys.readouterr().out
    assert "Measured: a fresh Python process decoding 16 tokens" in out and "| big (2 layers, key_only γ=1) | pytorch |" in out
    data = json.loads((tmp_path / "f.json").read_text())
    rss = {name.split()[0]: row["measured_rss"]["pytorch"] for name, row in data.items()}
    extra_weights = data["big (2 layers, key_only γ=1)"]["weight_bytes"]["fp32"] - \
        data["small (1 layer, key_only γ=1)"]["weight_bytes"]["fp32"]
    assert extra_weights > 20e6
    assert rss["big"]["model_bytes"] - rss["small"]["model_bytes"] >= 0.9 * extra_weights
    assert all(r["runtime_bytes"] > 50e6 and r["peak_bytes"] >= r["runtime_bytes"] for r in rss.values())


def test_onnx_runtime_decodes_in_a_process_without_torch_and_smaller_than_pytorch(tmp_path, capsys, monkeypatch):
    """(The run is exported once for both ONNX measurements; it was exported for each.)"""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import numpy as np

    from psattn.export import onnx as onnx_export

    exports, export = [], onnx_export.export_onnx
    monkeypatch.setattr(onnx_export, "export_onnx", lambda *args: exports.append(args) or export(*args))
    train(tiny_config(1), tmp_path / "run")
    ballast = np.ones(300 * 2**20 // 8)  # 300 MiB held by this process: not the child's peak
    assert main(["footprint", str(tmp_path / "run"), "--context", "16", "--measure", "pytorch", "onnx", "onnx-int8",
                 "--json", str(tmp_path / "f.json")]) == 0
    del ballast
    assert "| run (1 layer, key_only γ=1) | onnx-int8 |" in capsys.readouterr().out
    rss = json.loads((tmp_path / "f.json").read_text())["run (1 layer, key_only γ=1)"]["measured_rss"]
    assert rss["pytorch"]["torch_imported"] and not rss["onnx"]["torch_imported"] and not rss["onnx-int8"]["torch_imported"]
    # the runtime alone: ONNX Runtime and NumPy hold less than torch does before any model is loaded
    assert rss["onnx"]["runtime_bytes"] < rss["pytorch"]["runtime_bytes"]
    assert all(r["peak_bytes"] >= r["after_bytes"] > 0 for r in rss.values())
    assert rss["onnx"]["peak_bytes"] < 200 * 2**20  # exec would have kept the parent's peak in ru_maxrss
    assert len(exports) == 1


def test_an_unknown_runtime_is_refused():
    from psattn.export.footprint import measured_decode_rss

    with pytest.raises(ValueError, match="unknown runtime 'tflite'"):
        measured_decode_rss("nowhere", 4, "tflite")


def test_measure_is_bounded_and_refused_beyond_it_before_anything_runs(tmp_path, capsys, monkeypatch):
    """--measure --context 3000000 ran a decode loop with no end in sight; now it is refused in one line,
    and a measured loop draws a bar of the tokens decoded."""
    train(tiny_config(2), tmp_path / "run")
    with pytest.raises(SystemExit) as stop:
        main(["footprint", str(tmp_path / "run"), "--context", "3000000", "--measure"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "up to 65,536 tokens (asked 3,000,000)" in err and "Traceback" not in err, err
    from psattn.training import memory

    with monkeypatch.context() as patched:  # a cache that would not fit in the memory available now
        patched.setattr(memory, "available_bytes", lambda device: 2**10)
        with pytest.raises(SystemExit) as stop:
            main(["footprint", str(tmp_path / "run"), "--context", "1000", "--measure"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--measure at 1,000 tokens does not fit in memory" in err, err
    seen = []
    from psattn.export import footprint as footprint_module

    class Bar:  # what progress_bar hands back, recording the tokens it is told of
        def __init__(self, **kwargs):
            seen.append(kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            seen.append(n)

    monkeypatch.setattr(footprint_module, "progress_bar", Bar)
    footprint_module.measured_decode_rss(tmp_path / "run", 200, progress=True)
    assert seen[0]["total"] == 200 and sum(n for n in seen[1:]) == 200


def mixed_run(path):
    """A trained run whose two layers differ: a baseline layer under a key-only one."""
    import dataclasses

    config = tiny_config(1)
    layers = [AttentionConfig("baseline"), AttentionConfig("key_only", 1.0)]
    train(dataclasses.replace(config, model=dataclasses.replace(config.model, n_layers=2, attention=layers)), path)
    return path


def test_a_run_whose_layers_differ_is_labelled_by_every_layer(tmp_path, capsys):
    """A baseline layer under a key-only one read "(2 layers, baseline)" beside its 128 B of PSA state."""
    assert main(["footprint", str(mixed_run(tmp_path / "run")), "--json", str(tmp_path / "f.json")]) == 0
    assert "| run (2 layers, baseline / key_only γ=1) |" in capsys.readouterr().out
    data = json.loads((tmp_path / "f.json").read_text())["run (2 layers, baseline / key_only γ=1)"]
    assert data["cache_fixed_bytes"] > 0  # the key-only layer's last raw keys


def test_an_onnx_measurement_of_a_run_export_refuses_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """--measure pytorch onnx of a run whose layers differ measured PyTorch, then failed with export's own error,
    which named neither the run nor --measure."""
    from psattn.export import footprint as footprint_module

    run = mixed_run(tmp_path / "run")
    measured, real = [], footprint_module.measured_decode_rss

    def measure(run_dir, context, runtime, **kwargs):  # PyTorch's loop recorded, not run; ONNX Runtime's as it is
        measured.append(runtime)
        return real(run_dir, context, runtime) if runtime != "pytorch" else {"peak_bytes": 0, "runtime_bytes": 0,
                                                                              "model_bytes": 0}

    monkeypatch.setattr(footprint_module, "measured_decode_rss", measure)
    with pytest.raises(SystemExit) as stop:
        main(["footprint", str(run), "--measure", "pytorch", "onnx"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and measured == [] and "Traceback" not in err
    assert f"--measure onnx runs the graphs psattn export writes, and {run} cannot be exported" in err
