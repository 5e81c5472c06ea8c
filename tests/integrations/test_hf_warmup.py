"""Converting a model to PSA: γ warm-up from 0 (schedule and Trainer callback), LoRA, gradient checkpointing."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from integrations.hf_tiny import VOCAB, tiny_model  # noqa: E402
from psattn.integrations.hf import (  # noqa: E402
    GammaWarmup,
    apply_psa,
    gamma_warmup,
    load_psa_model,
    psa_spec,
    set_psa_gamma,
)
from psattn.ops.hooks import capture  # noqa: E402


def test_gamma_warmup_schedule():
    assert [gamma_warmup(s, 1.0, 4) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert gamma_warmup(0, 0.8, 0) == 0.8
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 0, got -1"):
        gamma_warmup(0, 1.0, -1)
    for bad in (2.5, True):  # type mistakes: TypeErrors (they were ValueErrors)
        with pytest.raises(TypeError, match=f"warmup_steps must be an int >= 0, got {bad}"):
            gamma_warmup(0, 1.0, bad)
    with pytest.raises(ValueError, match="finite"):
        GammaWarmup(float("nan"), 10)
    for bad in ("1", None):  # math.isfinite's "must be real number, not str", naming no argument
        for call, args in ((GammaWarmup, (bad, 10)), (gamma_warmup, (0, bad, 4))):
            with pytest.raises(TypeError, match=f"gamma must be a real number, got {type(bad).__name__}"):
                call(*args)


@pytest.mark.parametrize("gamma,error,match", [
    (1e9, ValueError, r"^gamma must lie within ±10000"), (True, TypeError, r"^gamma must be a real number, got bool$"),
    ("1.0", TypeError, r"^gamma must be a real number, got str$"),
])
def test_gamma_warmup_refuses_what_set_psa_gamma_refuses_as_it_is_built(gamma, error, match):
    """GammaWarmup(1e9, ...) and GammaWarmup(True, ...) were built, and set_psa_gamma refused 1e9 only once training
    began (True ran as γ = 1); a string failed in math.isfinite ("must be real number, not str"). Each is now refused
    as the callback is built, naming gamma."""
    with pytest.raises(error, match=match):
        GammaWarmup(gamma, 10)
    with pytest.raises(error, match=match):
        gamma_warmup(3, gamma, 10)


def test_loss_at_gamma_zero_equals_the_unpatched_model(prompt):
    plain, psa = tiny_model(), apply_psa(tiny_model(), "key_only", 0.0)
    with torch.no_grad():
        assert torch.equal(psa(prompt, labels=prompt).loss, plain(prompt, labels=prompt).loss)


def _rows(n=16, length=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n, length), generator=g)
    return [{"input_ids": r, "labels": r} for r in ids]


def _layer_gammas(model, prompt):
    """γ_k of every layer, read from the streams: k̂ - k = γ (k - k_prev) at position 1."""
    with capture(model, "*.hook_k", "*.hook_k_sheared") as seen, torch.no_grad():
        model(prompt, use_cache=False)
    out = []
    for name in [n for n in seen if n.endswith("hook_k")]:
        k, k_hat = seen[name], seen[name + "_sheared"]
        d, step = (k_hat - k)[..., 1, :], (k[..., 1, :] - k[..., 0, :])
        out.append(float((d * step).sum() / (step * step).sum()))
    return out


class _Record(TrainerCallback):
    def __init__(self):
        self.gammas = []

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.gammas.append(psa_spec(model).gamma)


def _trainer(model, tmp_path, steps, callbacks, **kw):
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=1e-2, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, logging_strategy="no", **kw)
    return Trainer(model=model, args=args, train_dataset=_rows(), callbacks=callbacks)


def test_trainer_callback_warms_gamma_up_on_every_layer(tmp_path, prompt):
    model = apply_psa(tiny_model().float(), "key_only", 0.0)
    record = _Record()
    _trainer(model, tmp_path, 5, [GammaWarmup(1.0, 4), record]).train()
    assert record.gammas == [0.0, 0.25, 0.5, 0.75, 1.0]
    model.eval()
    assert _layer_gammas(model, prompt) == pytest.approx([1.0, 1.0], abs=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients(prompt):
    grads = []
    for checkpointing in (False, True):
        model = apply_psa(tiny_model(), "symmetric", 0.7).train()
        if checkpointing:  # renamed activation_checkpointing_enable in transformers 5.x
            (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model(prompt, labels=prompt, use_cache=False).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[1], grads[0])


def test_lora_with_psa_trains_only_the_adapters_and_reloads(tmp_path, prompt):
    peft = pytest.importorskip("peft")
    tiny_model().float().save_pretrained(tmp_path / "base")
    model = load_psa_model(tmp_path / "base", "key_only", 0.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    _trainer(lora, tmp_path / "out", 4, [GammaWarmup(1.0, 2)]).train()
    lora.eval()
    trained = {n.replace(".base_layer", ""): p for n, p in model.named_parameters()}
    assert set(before) < set(trained)
    assert all(torch.equal(before[n], trained[n]) for n in before)  # the base weights stay
    assert all(not torch.equal(p, torch.zeros_like(p)) for n, p in trained.items() if "lora_B" in n)  # init 0
    assert psa_spec(model).gamma == 1.0
    with torch.no_grad():
        want = lora(prompt).logits
    lora.save_pretrained(tmp_path / "adapter")
    base = load_psa_model(tmp_path / "base", "key_only", 1.0)
    reloaded = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(prompt).logits, want)
    # an adapter holds no PSA setting: PEFT's own loader rebuilds the plain base it names (as the docs warn)
    plain = peft.AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()
    assert psa_spec(plain.get_base_model()) is None
    merged = lora.merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    with torch.no_grad():
        torch.testing.assert_close(load_psa_model(tmp_path / "merged").eval()(prompt).logits, want,
                                   atol=1e-5, rtol=1e-5)


def test_set_psa_gamma_reaches_through_a_wrapper(prompt):
    peft = pytest.importorskip("peft")
    model = apply_psa(tiny_model(), "key_only", 0.0)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    set_psa_gamma(wrapped, 0.6)
    assert psa_spec(model).gamma == 0.6
    assert _layer_gammas(model, prompt) == pytest.approx([0.6, 0.6], abs=1e-9)
