"""The trainer's optimiser: torch's default AdamW on the CPU, bit for bit; the fused AdamW where every
parameter is a CUDA floating tensor (one ``_fused_adamw_`` dispatch a parameter group); a checkpoint's
optimiser state resumes with the implementation it was saved with."""

import copy
from types import SimpleNamespace

import pytest
import torch

from helpers import tiny_config
from psattn.timing import dispatched_operations
from psattn.training import schedule
from psattn.training.run_dir import build_model
from psattn.training.schedule import build_optimizer, fused_on, lr_factor


def parameter(device: str, floating: bool = True) -> SimpleNamespace:
    """What ``fused_on`` reads of a parameter: its device and whether it is floating point."""
    return SimpleNamespace(device=torch.device(device), is_floating_point=lambda: floating)


def test_fused_on_only_where_every_parameter_is_a_cuda_floating_tensor():
    assert fused_on([parameter("cuda"), parameter("cuda:1")])
    assert not fused_on([parameter("cuda"), parameter("cpu")])
    assert not fused_on([parameter("cuda"), parameter("cuda", floating=False)])
    assert not fused_on([])
    assert not fused_on(build_model(tiny_config()).parameters())
    assert not fused_on([torch.zeros(2, device="meta")])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_build_optimizer_on_a_gpu_is_fused():
    model = build_model(tiny_config()).cuda()
    optimizer, _ = build_optimizer(model, tiny_config().train)
    assert fused_on(model.parameters()) and [g["fused"] for g in optimizer.param_groups] == [True, True]


def steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int) -> None:
    """``n`` optimiser steps on the gradients of a fixed batch."""
    inputs = torch.randint(0, 16, (4, 16), generator=torch.Generator().manual_seed(1))
    for _ in range(n):
        optimizer.zero_grad(set_to_none=True)
        model(inputs).square().mean().backward()
        optimizer.step()


def test_build_optimizer_on_the_cpu_is_torchs_default_adamw_bit_for_bit():
    config = tiny_config()
    model, reference = build_model(config), build_model(config)
    optimizer, _ = build_optimizer(model, config.train)
    plain = torch.optim.AdamW([{"params": [p for p in reference.parameters() if p.dim() >= 2],
                                "weight_decay": config.train.weight_decay},
                               {"params": [p for p in reference.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                              lr=config.train.lr, betas=config.train.betas)
    torch.optim.lr_scheduler.LambdaLR(plain, lr_factor(config.train))  # build_optimizer's schedule at its step 0
    assert [(g["fused"], g["foreach"]) for g in optimizer.param_groups] == [(None, None)] * 2
    steps(model, optimizer, 3)
    steps(reference, plain, 3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))


def fused_optimizer(monkeypatch) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A small model and the optimiser ``build_optimizer`` gives it where ``fused_on`` holds, on the CPU
    (torch has a fused AdamW there too)."""
    monkeypatch.setattr(schedule, "fused_on", lambda parameters: True)
    model = build_model(tiny_config())
    return model, build_optimizer(model, tiny_config().train)[0]


def test_a_fused_step_dispatches_one_fused_adamw_a_parameter_group(monkeypatch):
    """Why a GPU runs fused: a step of the for-loop AdamW dispatches an operation or more a parameter
    (on a GPU, foreach's dozen a group each launch kernels per chunk of tensors); the fused one dispatches
    ``_fused_adamw_`` once a group (and one ``_foreach_add_`` a group for the step counters)."""
    default_model = build_model(tiny_config())
    default, _ = build_optimizer(default_model, tiny_config().train)
    model, fused = fused_optimizer(monkeypatch)
    counts = {}
    for name, m, optimizer in (("fused", model, fused), ("default", default_model, default)):
        steps(m, optimizer, 1)  # the first step also makes the moments
        counts[name] = dispatched_operations(optimizer.step)
    groups = len(fused.param_groups)
    assert groups == 2 and [g["fused"] for g in fused.param_groups] == [True, True]
    assert counts["fused"]["_fused_adamw_"] == groups and counts["fused"]["_foreach_add_"] == groups
    assert counts["default"]["_fused_adamw_"] == 0
    assert counts["default"]["addcdiv_"] == len(list(default_model.parameters())) == 15
    assert sum(counts["default"].values()) > 20 * sum(counts["fused"].values())


def test_a_resumed_optimizer_keeps_the_implementation_of_its_checkpoint(monkeypatch):
    """``load_state_dict`` takes the saved groups' ``fused``: a fused run resumed from its own state dict
    continues bit for bit, and a state dict saved by the default AdamW makes a fused optimiser default."""
    model, fused = fused_optimizer(monkeypatch)
    steps(model, fused, 2)
    saved_model, saved = copy.deepcopy(model.state_dict()), copy.deepcopy(fused.state_dict())
    steps(model, fused, 2)
    resumed_model, resumed = fused_optimizer(monkeypatch)
    resumed_model.load_state_dict(saved_model)
    resumed.load_state_dict(saved)
    steps(resumed_model, resumed, 2)
    assert all(torch.equal(a, b) for a, b in zip(resumed_model.parameters(), model.parameters(), strict=True))

    monkeypatch.undo()
    default_model = build_model(tiny_config())
    default, _ = build_optimizer(default_model, tiny_config().train)
    steps(default_model, default, 1)
    _, switched = fused_optimizer(monkeypatch)
    switched.load_state_dict(default.state_dict())
    assert [g["fused"] for g in switched.param_groups] == [None, None]
