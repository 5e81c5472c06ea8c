"""Every tensor psattn builds for a model is built on the model's device (or on a generator's, then
moved), never on PyTorch's default device.

A model on a GPU that meets a tensor made on the CPU fails ("Expected all tensors to be on the same
device"); training on CUDA once crashed at its first evaluation that way. A CPU-only machine cannot
place a model on a second real device, so these tests take the default device away instead: under
``torch.set_default_device("meta")`` a factory call that names no device makes a meta tensor, which
fails as soon as it meets the CPU model's tensors or is read. The model and the caller's inputs are
built before the default changes (on the CPU, as a user's would be); everything psattn makes after
that must say where it goes. The same paths then hold on CUDA, and under a user's own default device.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from helpers import tiny_config
from psattn import DecoderLM, ModelConfig
from psattn.cli import main
from psattn.models.device import model_device, on_cpu
from psattn.models.heads import head_scores
from psattn.training.config import RunConfig, apply_overrides, shipped_configs
from psattn.training.trainer import train


@contextlib.contextmanager
def no_default_device():
    """A default device that no real tensor lives on: tensors made without a device are meta."""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_the_guard_catches_a_tensor_made_on_the_default_device():
    x = torch.randn(3)
    with no_default_device(), pytest.raises(RuntimeError, match="device"):
        x + torch.arange(3)  # the kind of call that crashed training on CUDA


def test_head_scores_build_their_rows_and_indices_on_the_model_device():
    model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=2))
    expected = head_scores(model, batch=2, half=4)
    with no_default_device():
        scores = head_scores(model, batch=2, half=4)
    assert scores.as_dict() == expected.as_dict()


def optimizer_uses_the_default_device() -> bool:
    """Whether this torch's AdamW makes a tensor of its own on the default device (torch 2.11 made its step
    counter with ``torch.tensor(0.0)``, no device): the guard then breaks the optimizer, not psattn."""
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.ones(1)
    optimizer = torch.optim.AdamW([param])
    with no_default_device():
        try:
            optimizer.step()
        except RuntimeError:
            return True
    return False


def test_the_optimizer_probe_lets_the_trainer_tests_run_on_the_tested_torch():
    """torch 2.13, the version CI installs, makes AdamW's step counter on the CPU: no trainer test is skipped there."""
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13):
        pytest.skip(f"torch {torch.__version__} is older than the tested 2.13")
    assert not optimizer_uses_the_default_device()


TINY = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1", "train.steps=2", "train.eval_every=2",
        "train.batch_size=4", "train.eval_size=8", "train.device=cpu", "train.threads=1"]


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_every_shipped_task_trains_and_evaluates_without_a_default_device(name, tmp_path):
    if name == "text":
        pytest.importorskip("tokenizers")
    if optimizer_uses_the_default_device():
        pytest.skip(f"torch {torch.__version__}'s AdamW makes its step counter on the default device")
    config = apply_overrides(RunConfig.from_file(shipped_configs()[name]), TINY)
    expected = train(config, tmp_path / "a")
    with no_default_device():
        result = train(config, tmp_path / "b")
    assert result.history[-1]["eval_loss"] == pytest.approx(expected.history[-1]["eval_loss"])


def test_eval_generate_export_and_footprint_commands_without_a_default_device(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    (tmp_path / "a.txt").write_text("def f(x):\n    return x + 1\n\n" * 200)
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(tmp_path / "a.txt"), "seq_len": 32},
                                  "model": {"vocab_size": 256}})
    run = str(tmp_path / "run")
    train(apply_overrides(config, TINY), run)
    with no_default_device():
        assert main(["eval", "--run-dir", run, "--device", "cpu", "--json"]) == 0
        scores = json.loads(capsys.readouterr().out)
        assert main(["generate", "--run-dir", run, "--device", "cpu", "--prompt", "def", "--max-new-tokens", "40"]) == 0
        assert capsys.readouterr().out.startswith("def")
        assert main(["footprint", run, "--json"]) == 0
        assert main(["export", "--run-dir", run, "--format", "onnx", "--out", str(tmp_path / "m.onnx"), "--json"]) == 0
    assert scores["bits_per_byte"] > 0
    assert (tmp_path / "m.onnx").exists()


def test_hf_models_with_psa_generate_and_report_heads_without_a_default_device():
    transformers = pytest.importorskip("transformers")
    from psattn.integrations.hf import apply_psa

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = apply_psa(transformers.LlamaForCausalLM(config).eval(), variant="key_only", gamma=0.5)
    ids = torch.randint(1, 64, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    with no_default_device():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        head_scores(model, batch=2, half=4, vocab_size=64)
    assert torch.equal(out, expected)


def test_generate_moves_the_prompt_to_the_model_and_on_cpu_copies_only_when_needed():
    from psattn import generate

    model = DecoderLM(tiny_config(1).model).eval()
    assert model_device(model) == torch.device("cpu") and on_cpu(model) is model
    prompt = torch.randint(0, model.config.vocab_size, (2, 5))
    with no_default_device():
        out = generate(model, prompt, 3, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert out.sequences.device == torch.device("cpu") and out.sequences.shape == (2, 8)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_float64_or_bf16_model_scores_and_decodes_without_a_default_device(dtype):
    """float64 RoPE tables and a 16-bit model's frequencies were computed on the default device (the meta one
    here: "Cannot copy out of meta tensor"), then moved; the scored positions' indices are made beside the mask."""
    from helpers import random_model
    from psattn.models.scored import Scored

    model = random_model("symmetric")
    if dtype == torch.bfloat16:
        with no_default_device():
            model = model.to(dtype)
    x = torch.randint(0, 37, (3, 9), generator=torch.Generator().manual_seed(0))
    keep = torch.zeros(3, 9, dtype=torch.bool)
    keep[0, [2, 8]] = keep[2, 5] = True
    want = model(x)
    with no_default_device():
        by_mask, by_index = model(x, scored=keep), model(x, scored=Scored.of(keep))
        cache = model.new_cache()
        steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in range(9)], dim=1)
    assert torch.allclose(by_mask.float(), want[keep].float(), atol=1e-10 if dtype == torch.float64 else 5e-2)
    assert torch.equal(by_index, by_mask)
    tolerance = 1e-10 if dtype == torch.float64 else 5e-2
    assert steps.device == want.device and torch.allclose(steps.float(), want.float(), atol=tolerance)
