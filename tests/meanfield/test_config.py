"""SimulationConfig rejects bad inputs with clear ValueErrors."""

import json
import math

import numpy as np
import pytest
import torch

from psattn.meanfield.config import KernelConfig, SimulationConfig, build_kernel


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(d=1), "d ≥ 2"),
        (dict(n=1), "n ≥ 2"),
        (dict(beta=-1.0), "beta must be positive"),
        (dict(beta=0.0), "beta must be positive"),
        (dict(beta=100.0, dtype="float32"), "overflows"),
        (dict(dt=-0.1), "step dt must be positive"),
        (dict(dt=0.0), "step dt must be positive"),
        (dict(tau=-1.0), "tau must be positive"),
        (dict(integrator="leapfrog"), "unknown integrator"),
        (dict(dynamics="softmax"), "unknown dynamics"),
        (dict(dtype="float16"), "unknown dtype"),
        (dict(frame="lab"), "unknown frame"),
        (dict(batch=0), "batch"),
        (dict(threshold=1.0), "threshold"),
        (dict(kernel=KernelConfig("rope"), labels=(0.0, 1.0)), "labels must have length n = 4"),
        (dict(labels=(0.0, 0.0, 1.0, 1.0)), "single label"),
        (dict(kernel=KernelConfig("rope", frequencies=(1.0, 2.0))), "at most 1 planes"),
        (dict(kernel=KernelConfig("generalised_rope", planes=((0, 3),), frequencies=(1.0,))), "distinct axes"),
        (dict(kernel=KernelConfig("generalised_rope", frequencies=(1.0,))), "one frequency per plane"),
        (dict(kernel=KernelConfig("prefix", n_prompts=2), labels=(0.0, 1.0, 2.0, 0.0)), "prompt ids"),
        (dict(kernel=KernelConfig("gauge", gauges=[[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]]])), "orthogonal"),
        (dict(kernel=KernelConfig("gauge", gauges=[[[1.0, 0.0], [0.0, 1.0]]])), "gauges must have shape"),
        (dict(threshold=math.nan), "threshold must be finite"),
        (dict(kernel=KernelConfig("rope"), labels=(0, 1, math.nan, 3)), r"labels\[2\] must be finite"),
        (dict(batch="2"), "batch must be an integer, got '2'"),
        (dict(n_records=2.5), "n_records must be an integer, got 2.5"),
        (dict(n=True), "n must be an integer"),
        (dict(dtype=64), "dtype must be a string"),
        (dict(keep_states="yes"), "keep_states must be true or false"),
        (dict(kernel={"name": "rope", "bogus": 1}), "unknown kernel field 'bogus'"),
        (dict(kernel=3), "kernel must be an object"),
        (dict(dt=1e-320), "takes inf steps"),  # tau / η overflowed math.ceil
        (dict(tau=1e12), "more than 1,000,000,000"),
    ],
)
def test_bad_config_raises(kwargs, match):
    base = dict(n=4, d=3)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        SimulationConfig(**base)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(name="alibi"), "unknown kernel"),
        (dict(name="distance_bias", decay=-1.0), "non-negative"),
        (dict(name="prefix", n_prompts=0), "n_prompts"),
        (dict(name="gauge"), "needs gauges"),
        (dict(name="pair"), "needs pair_matrices"),
        (dict(name="cosine_toeplitz", omega=math.nan), "kernel omega must be finite"),
        (dict(name="distance_bias", decay=math.inf), "kernel decay must be finite"),
        (dict(name="rope", frequencies=1.0), "kernel frequencies must be a list of numbers"),
        (dict(name="rope", frequencies=(math.inf,)), r"kernel frequencies\[0\] must be finite"),
        (dict(name="prefix", n_prompts=2.0), "kernel n_prompts must be an integer"),
        (dict(name="generalised_rope", planes=(0, 1)), "planes must be a list of axis pairs"),
    ],
)
def test_bad_kernel_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KernelConfig(**kwargs)


def test_non_orthogonal_pair_matrices_rejected():
    pairs = torch.eye(3, dtype=torch.float64).expand(4, 4, 3, 3).clone()
    pairs[0, 1] *= 1.5
    pairs[1, 0] *= 1.5
    with pytest.raises(ValueError, match="orthogonal"):
        SimulationConfig(n=4, d=3, kernel=KernelConfig("pair", pair_matrices=pairs.tolist()))


@pytest.mark.parametrize("kernel,match", [
    (dict(name="gauge", gauges=[[[math.nan, 0.0], [0.0, 1.0]]]), "gauges must be finite"),
    (dict(name="gauge", gauges=[[[1.0, 0.0], [0.0, 1.0]]], label_factor=[[1.0, math.inf], [math.inf, 1.0]]),
     "label factor must be finite"),
    (dict(name="gauge", gauges="abc"), "kernel gauges must be a nested list of numbers"),
    (dict(name="gauge", gauges=[[[1.0, 0.0], [0.0]]]), "kernel gauges must be a nested list of numbers"),
    (dict(name="gauge", gauges=[[[1.0, 0.0], [0.0, 1.0]]], label_factor="x"), "kernel label_factor must be a nested"),
    (dict(name="pair", pair_matrices=[[[[1.0, 0.0]]]] * 2 + [[1.0]]), "kernel pair_matrices must be a nested"),
])
def test_a_kernel_table_that_is_not_finite_numbers_is_refused(kernel, match):
    """Non-finite tables ran, into NaN states and energies; strings and ragged lists raised torch's words."""
    with pytest.raises(ValueError, match=match):
        SimulationConfig(n=2, d=2, kernel=KernelConfig(**kernel))


def test_build_kernel_names_a_config_of_another_type():
    with pytest.raises(TypeError, match="build_kernel takes a SimulationConfig, got dict"):
        build_kernel({"n": 4})  # 'dict' object has no attribute 'kernel'


def test_kernel_tables_given_as_arrays_are_written_as_json():
    # an ndarray or tensor of gauges ran, then summary.json failed: 'Object of type ndarray is not JSON serializable'
    gauges = torch.linalg.qr(torch.randn(2, 3, 3, dtype=torch.float64))[0]
    for table in (gauges, gauges.numpy()):
        cfg = SimulationConfig(n=4, d=3, kernel=KernelConfig("gauge", gauges=table, label_factor=np.ones((4, 4))))
        assert json.loads(json.dumps(cfg.to_dict()))["kernel"]["gauges"] == gauges.tolist()
        assert torch.equal(build_kernel(cfg).gauges, gauges[[0, 0, 1, 1]])


def test_pair_kernel_cannot_run_comoving():
    pairs = torch.eye(3, dtype=torch.float64).expand(4, 4, 3, 3).tolist()
    with pytest.raises(ValueError, match="not of gauge form"):
        SimulationConfig(n=4, d=3, kernel=KernelConfig("pair", pair_matrices=pairs), frame="comoving")


def test_default_labels():
    assert build_kernel(SimulationConfig(n=4, kernel=KernelConfig("rope"))).labels.tolist() == [0, 1, 2, 3]
    assert build_kernel(SimulationConfig(n=4, kernel=KernelConfig("prefix", n_prompts=2))).labels.tolist() == [0, 0, 1, 1]
    assert build_kernel(SimulationConfig(n=4)).labels.tolist() == [0, 0, 0, 0]


def test_given_labels_reach_the_kernel_of_every_name():
    """Labels given to the 'usa' kernel came back as zeros, and those given to 'pair' as 0..n−1: the run's
    labels (and its per-label diagnostics) were not the ones asked for."""
    assert build_kernel(SimulationConfig(n=4, labels=(3.0,) * 4)).labels.tolist() == [3.0] * 4
    pairs = torch.eye(3, dtype=torch.float64).expand(4, 4, 3, 3).tolist()
    cfg = SimulationConfig(n=4, d=3, kernel=KernelConfig("pair", pair_matrices=pairs), labels=(0.0, 0.0, 1.0, 1.0))
    assert build_kernel(cfg).labels.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert build_kernel(SimulationConfig(n=4, d=3, kernel=KernelConfig("pair", pair_matrices=pairs))).labels.tolist() == [
        0.0, 1.0, 2.0, 3.0]


def test_kernel_given_as_dict_and_to_dict_round_trip():
    cfg = SimulationConfig(n=4, kernel={"name": "cosine_toeplitz", "omega": 0.5})
    assert isinstance(cfg.kernel, KernelConfig)
    assert SimulationConfig(**cfg.to_dict()) == cfg


def test_a_run_beyond_the_memory_available_is_refused_before_its_kernel_is_built():
    """n = 1024 keeps c and |c| (1024 × 1024, float64 and the run's dtype): about 32 MiB against 1 MiB free."""
    with pytest.raises(ValueError, match=r"does not fit in memory: n=1024 .* GiB is available"):
        SimulationConfig(n=1024, available_memory=2**20)
    config = SimulationConfig(n=1024)  # no memory given: what the host has free, here enough
    assert config.memory_bytes(config.step_size()[1]) > 4 * 8 * 1024**2
    assert "available_memory" not in config.to_dict()


def test_a_python_callers_run_beyond_the_hosts_free_memory_is_refused_before_anything_is_allocated(tmp_path,
                                                                                                    monkeypatch):
    """Only the command line passed the host's free memory: from Python, SimulationConfig(n=20000) built its kernel
    on the labels (two 20000 × 20000 float64 tables, 6.4 GB) at once and simulate() went on to about 24 GiB, ending
    in the allocator's RuntimeError or the OOM killer. (1 MiB free stands in for a small machine.)"""
    import importlib

    from psattn.meanfield import config as module
    from psattn.meanfield import experiments

    simulate = importlib.import_module("psattn.meanfield.simulate")  # the module, not the package's function

    def built(config):
        raise AssertionError("the kernel was built")

    monkeypatch.setattr(module, "host_available_bytes", lambda: 2**20, raising=False)
    monkeypatch.setattr(module, "build_kernel", built)
    monkeypatch.setattr(simulate, "build_kernel", built)
    refused = r"^the simulation does not fit in memory: n=1024 .* need about 0\.1 GiB, and 0\.0 GiB is available$"
    with pytest.raises(ValueError, match=refused):
        SimulationConfig(n=1024, keep_states=True)
    monkeypatch.undo()
    config = SimulationConfig(n=1024, keep_states=True, tau=0.1)  # made where it fits, run where it does not
    monkeypatch.setattr(module, "host_available_bytes", lambda: 2**20, raising=False)
    monkeypatch.setattr(simulate, "build_kernel", built)
    with pytest.raises(ValueError, match=refused):
        simulate.simulate(config)
    with pytest.raises(experiments.ExperimentsFailed, match=r"^run 1 of 1 \(usa_n1024\) failed: the simulation does not"):
        experiments.run_experiments([config], tmp_path)
    monkeypatch.setattr(module, "host_available_bytes", lambda: None)  # not readable: not checked
    assert SimulationConfig(n=16).n == 16


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_beta_an_overflow_message_names_is_accepted(dtype):
    """The refusal of an overflowing beta names the largest beta to keep; that beta runs (the bound was rounded
    up: "keep beta ≤ 80" refused beta = 80 in float32, 639 in float64)."""
    import re

    with pytest.raises(ValueError, match="overflows") as err:
        SimulationConfig(dtype=dtype, beta=1000.0, dt=1e300, tau=1.0)
    bound = float(re.search(r"keep beta ≤ ([0-9.]+)", str(err.value)).group(1))
    assert SimulationConfig(dtype=dtype, beta=bound, dt=1e300, tau=1.0).beta == bound


@pytest.mark.parametrize("kernel", [dict(name="rope", frequencies=()),
                                    dict(name="generalised_rope", planes=(), frequencies=[])])
def test_a_rope_kernel_needs_a_frequency(kernel):
    """No frequency rotates no plane: the run was plain USA (it collapsed) under the name rope."""
    with pytest.raises(ValueError, match="needs at least one frequency"):
        SimulationConfig(n=4, kernel=kernel)


def test_the_memory_estimate_counts_gauges_only_for_kernels_that_have_them():
    """Plain USA in d = 4096 (n = 256) was refused as needing 64 GiB, for the gauges (n, d, d) its kernel does not
    have (A = I; it needs under 1 GiB); RoPE's gauges take 32 GiB in float64, and it is still refused."""
    free = 4 * 2**30
    for name in ("usa", "cosine_toeplitz", "distance_bias"):
        config = SimulationConfig(n=256, d=4096, tau=0.2, kernel=KernelConfig(name), available_memory=free)
        assert config.memory_bytes(config.step_size()[1]) < 2**30
    with pytest.raises(ValueError, match="does not fit in memory"):
        SimulationConfig(n=256, d=4096, tau=0.2, kernel=KernelConfig("rope"), available_memory=free)


def test_a_label_factor_beyond_the_runs_dtype_is_refused_with_the_config():
    """c = 1e39 is finite as given and inf in float32: the config took it, and simulate, casting the kernel to the
    run's dtype, said only 'label factor must be finite, got NaN or infinite entries'."""
    kernel = KernelConfig("gauge", gauges=[torch.eye(3).tolist()], label_factor=[[1e39] * 4] * 4)
    with pytest.raises(ValueError, match=r"^kernel label_factor has an entry of 1e\+39, beyond the largest float32 "
                                         r"\(3.4e\+38\); scale it down or use dtype float64$"):
        SimulationConfig(n=4, dtype="float32", kernel=kernel)
    SimulationConfig(n=4, dtype="float64", kernel=kernel)
