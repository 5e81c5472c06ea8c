import json

import pytest

from helpers import random_model, shared, tiny_config
from psattn.experiments.configs import small_config
from psattn.training import train


@pytest.fixture(scope="session")
def induction_run(tmp_path_factory):
    """A one-layer key-only model trained on induction until it has learned it (300 steps), shared by
    the tests that export a model whose accuracy must survive."""
    return shared(tmp_path_factory, "induction-run",
                  lambda run: train(small_config("key_only", 1.0, steps=300, early_stop=False), run))


def onnx_float_model(variant, placement="post_rope"):
    """Two layers, GQA, weights large enough that the logits depend strongly on the input, in fp32."""
    return random_model(variant, placement, gamma=0.8, std=0.2, n_kv_heads=2).float()


@pytest.fixture(scope="session")
def onnx_export(tmp_path_factory):
    """``onnx_export(variant, placement)``: ``onnx_float_model(variant, placement)`` and its ONNX export
    (``OnnxPaths``), exported once per session for every test that reads it."""
    from psattn.export.onnx import OnnxPaths, export_onnx

    def exported(variant, placement="post_rope"):
        model = onnx_float_model(variant, placement)
        folder = shared(tmp_path_factory, f"onnx-{variant}-{placement}", lambda f: export_onnx(model, f / "m.onnx"))
        return model, OnnxPaths(folder / "m.onnx", folder / "m.decode.onnx", folder / "m.onnx.data")

    return exported


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A one-layer key-only run (with an MLP, tied embeddings; rows of 16 tokens) trained 20 steps, once per session."""
    return shared(tmp_path_factory, "tiny-run", lambda folder: train(tiny_config(20), folder))


@pytest.fixture(scope="session")
def int8_export(tmp_path_factory, tiny_run):
    """``int8_export(mode)``: ``tiny_run`` and ``export_and_compare``'s result for it with ``int8=mode`` (32 rows,
    4 decoded tokens), each mode exported once per session."""
    from psattn.export.compare import export_and_compare

    run = tiny_run

    def exported(mode):
        def make(folder):
            result = export_and_compare(run, folder / "m.onnx", int8=mode, rows=32, decode_tokens=4)
            (folder / "result.json").write_text(json.dumps(result))

        return run, json.loads((shared(tmp_path_factory, f"int8-{mode}", make) / "result.json").read_text())

    return exported
