"""Typed, validated configuration of one mean-field simulation.

>>> cfg = SimulationConfig(n=64, d=3, beta=1.0, kernel=KernelConfig("rope", frequencies=(1.0,)), tau=20.0)
>>> build_kernel(cfg).name
'rope'

Labels default per kernel: all zero for ``usa``; positions 0, 1, ..., n−1 for the positional kernels;
contiguous blocks of prompt ids 0..n_prompts−1 for ``prefix``; 0..m−1 in blocks for ``gauge``; 0..n−1 for
``pair``, whose given labels only group tokens in the per-label diagnostics.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from dataclasses import InitVar, asdict, dataclass, field, fields, replace
from typing import Any

import torch

from psattn.meanfield.dynamics import DYNAMICS
from psattn.meanfield.integrators import STEPPERS, usa_step_size
from psattn.meanfield.kernels import (
    LabelledKernel,
    cosine_toeplitz_kernel,
    distance_bias_kernel,
    gauge_kernel,
    generalised_rope_kernel,
    pair_kernel,
    plain_kernel,
    prefix_kernel,
    rope_kernel,
)
from psattn.meanfield.memory import check_memory, estimate_bytes, record_bytes
from psattn.processes import host_available_bytes

KERNEL_NAMES = ("usa", "rope", "generalised_rope", "cosine_toeplitz", "distance_bias", "prefix", "gauge", "pair")
POSITIONAL_KERNELS = ("rope", "generalised_rope", "cosine_toeplitz", "distance_bias")
GAUGE_KERNELS = ("rope", "generalised_rope", "prefix", "gauge")  # per-token gauges G(ξ_i) (n, d, d)
FRAMES = ("auto", "comoving", "direct")
DTYPES = {"float64": torch.float64, "float32": torch.float32}

DEFAULT_FREQUENCIES = {"rope": (1.0,), "generalised_rope": (1.0, 0.25)}
DEFAULT_PLANES = ((0, 1), (1, 2))

Array = list | tuple  # nested lists / tuples of floats (JSON-friendly)

#: the most steps a run may take: beyond it a run would not end in days (and its energy record alone is GiBs)
MAX_STEPS = 10**9


def _integer(value: Any, name: str) -> int:
    """``value`` if it is an integer (not a bool), else a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _seed(value: Any, name: str) -> int:
    """``value`` if it is an integer seed in [0, 2**32) (as every psattn seed), else a ValueError naming the field."""
    value = _integer(value, name)
    if not 0 <= value < 2**32:
        raise ValueError(f"{name} must be a seed in [0, 2**32 = {2**32}), got {value}")
    return value


def _real(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite real number (not a bool), else a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _reals(values: Any, name: str) -> tuple[float, ...]:
    """A list or tuple of finite real numbers, as floats."""
    if not isinstance(values, list | tuple):
        raise ValueError(f"{name} must be a list of numbers, got {values!r}")
    return tuple(_real(v, f"{name}[{i}]") for i, v in enumerate(values))


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _known_fields(values: dict[str, Any], cls: type, what: str) -> dict[str, Any]:
    """``values`` if every key names a field of dataclass ``cls``, else a ValueError naming the others."""
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"unknown {what} field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(f.name for f in fields(cls))}")
    return values


@dataclass
class KernelConfig:
    """Kernel name and its parameters; only the fields of the chosen kernel are read."""

    name: str = "usa"
    frequencies: tuple[float, ...] | None = None  # rope, generalised_rope (None: the defaults above)
    planes: tuple[tuple[int, int], ...] = DEFAULT_PLANES  # generalised_rope: one plane per frequency
    omega: float = 1.0  # cosine_toeplitz: c = cos(ω (s − t))
    decay: float = 1.0  # distance_bias: c = exp(−λ |s − t|)
    n_prompts: int = 4  # prefix: number of prompts
    gauge_seed: int = 0  # prefix: seed of the random orthogonal gauges
    gauges: Array | None = None  # gauge: per-label orthogonal matrices (m, d, d)
    label_factor: Array | None = None  # gauge, pair: c_ij (n, n); default all ones
    pair_matrices: Array | None = None  # pair: A_ij (n, n, d, d)

    def __post_init__(self) -> None:
        if self.name not in KERNEL_NAMES:
            raise ValueError(f"unknown kernel {self.name!r}; choose one of {KERNEL_NAMES}")
        # an array or tensor of a table as its nested lists: the run's summary.json and config.json could not hold it
        for name in ("gauges", "label_factor", "pair_matrices"):
            value = getattr(self, name)
            if hasattr(value, "tolist") and not isinstance(value, list | tuple | str):
                setattr(self, name, value.tolist())
        if self.frequencies is not None:
            self.frequencies = _reals(self.frequencies, "kernel frequencies")
        if not isinstance(self.planes, list | tuple) or not all(
                isinstance(p, list | tuple) and len(p) == 2 for p in self.planes):
            raise ValueError(f"kernel planes must be a list of axis pairs, got {self.planes!r}")
        self.planes = tuple((_integer(a, "a plane's axis"), _integer(b, "a plane's axis")) for a, b in self.planes)
        self.omega = _real(self.omega, "kernel omega")
        self.decay = _real(self.decay, "kernel decay")
        self.n_prompts = _integer(self.n_prompts, "kernel n_prompts")
        self.gauge_seed = _seed(self.gauge_seed, "kernel gauge_seed")
        if self.name in DEFAULT_FREQUENCIES and self.frequencies == ():  # no plane rotated: plain USA, named RoPE
            raise ValueError(f"kernel {self.name!r} needs at least one frequency (none rotates no plane: plain USA; "
                             "use kernel 'usa' for that)")
        if self.name == "distance_bias" and not self.decay >= 0:
            raise ValueError(f"distance bias decay λ must be non-negative, got {self.decay}")
        if self.name == "prefix" and self.n_prompts < 1:
            raise ValueError(f"prefix kernel needs n_prompts ≥ 1, got {self.n_prompts}")
        if self.name == "gauge" and self.gauges is None:
            raise ValueError("kernel 'gauge' needs gauges (m, d, d)")
        if self.name == "pair" and self.pair_matrices is None:
            raise ValueError("kernel 'pair' needs pair_matrices (n, n, d, d)")

    def resolved_frequencies(self) -> tuple[float, ...]:
        """The kernel's frequencies: the given ones, or the kernel's defaults."""
        return self.frequencies if self.frequencies is not None else DEFAULT_FREQUENCIES[self.name]


@dataclass
class SimulationConfig:
    """One run: n particles on ``S^{d−1}``, a kernel, the dynamics and the integrator."""

    n: int = 64
    d: int = 3
    beta: float = 1.0
    kernel: KernelConfig = field(default_factory=KernelConfig)
    labels: tuple[float, ...] | None = None  # frozen ξ_i, length n; None: the kernel's default
    dynamics: str = "usa"  # "usa" | "sa"
    integrator: str = "rk4"  # "euler" | "rk4"
    dt: float = 0.1  # base step; USA uses η = dt / max(√β e^{β−1/2}, 1) when beta_aware_step
    beta_aware_step: bool = True
    tau: float = 20.0  # time horizon
    seed: int = 0  # initial conditions: i.i.d. uniform on the sphere
    dtype: str = "float64"
    batch: int = 1  # independent initial conditions, one label set
    frame: str = "auto"  # "comoving" (gauge kernels), "direct" (per-pair reference), "auto"
    n_records: int = 101  # diagnostics are recorded at this many evenly spaced steps
    keep_states: bool = False  # keep the state at every record
    threshold: float = 0.999  # ⟨x_i, x_j⟩ above it counts as aligned / same cluster
    #: bytes free for the run (not a field): a run whose estimate exceeds most of it is refused before its kernel is
    #: built (psattn.meanfield.memory); None: what the host has free now (``psattn.processes.host_available_bytes``)
    available_memory: InitVar[int | None] = None

    def __post_init__(self, available_memory: int | None = None) -> None:
        if isinstance(self.kernel, dict):
            self.kernel = KernelConfig(**_known_fields(self.kernel, KernelConfig, "kernel"))
        if not isinstance(self.kernel, KernelConfig):
            raise ValueError(f"kernel must be an object with a name and its parameters, got {self.kernel!r}")
        for name in ("n", "d", "batch", "n_records"):
            setattr(self, name, _integer(getattr(self, name), name))
        self.seed = _seed(self.seed, "seed")
        for name in ("beta", "dt", "tau", "threshold"):
            setattr(self, name, _real(getattr(self, name), name))
        for name in ("dynamics", "integrator", "dtype", "frame"):
            _string(getattr(self, name), name)
        for name in ("beta_aware_step", "keep_states"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.n < 2:
            raise ValueError(f"need n ≥ 2 particles, got {self.n}")
        if self.d < 2:
            raise ValueError(f"need dimension d ≥ 2 (sphere S^{{d−1}}), got {self.d}")
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"beta must be positive and finite, got {self.beta}")
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"step dt must be positive, got {self.dt}")
        if not (math.isfinite(self.tau) and self.tau > 0):
            raise ValueError(f"time horizon tau must be positive, got {self.tau}")
        if self.dynamics not in DYNAMICS:
            raise ValueError(f"unknown dynamics {self.dynamics!r}; choose one of {DYNAMICS}")
        if self.integrator not in STEPPERS:
            raise ValueError(f"unknown integrator {self.integrator!r}; choose one of {tuple(STEPPERS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {tuple(DTYPES)}")
        max_beta = 0.9 * math.log(torch.finfo(DTYPES[self.dtype]).max)
        if self.beta > max_beta:
            # the bound rounded down: the beta the message names is accepted (rounded, 80 and 639 were refused)
            raise ValueError(f"beta = {self.beta} overflows e^β in {self.dtype}; keep beta ≤ {math.floor(max_beta)}")
        if self.frame not in FRAMES:
            raise ValueError(f"unknown frame {self.frame!r}; choose one of {FRAMES}")
        if self.batch < 1:
            raise ValueError(f"batch must be ≥ 1, got {self.batch}")
        if self.n_records < 2:
            raise ValueError(f"n_records must be ≥ 2, got {self.n_records}")
        if not -1.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must lie in (−1, 1), got {self.threshold}")
        if self.labels is not None:
            self.labels = _reals(self.labels, "labels")
            if len(self.labels) != self.n:
                raise ValueError(f"labels must have length n = {self.n}, got {len(self.labels)}")
        _, steps = self.step_size()
        self._given_memory = available_memory  # what the caller gave, for the check of a list (run_experiments)
        if available_memory is None:  # a Python caller's run was not checked: it died in the allocator or the OOM killer
            available_memory = host_available_bytes()
        if available_memory is not None:  # before the kernel on the n labels is built
            check_memory(self.memory_bytes(steps), available_memory,
                         f"n={self.n} particles in d={self.d}, batch {self.batch}, {steps:,} steps and "
                         f"{min(self.n_records, steps + 1):,} records")
        kernel = build_kernel(self)  # raises on non-orthogonal gauges, bad planes, bad ids ...
        largest, beyond = float(kernel.label_factor.abs().max()), torch.finfo(self.torch_dtype).max
        if largest > beyond:  # inf once cast to the run's dtype (gauges and pair matrices are orthogonal: |entries| ≤ 1)
            raise ValueError(f"kernel label_factor has an entry of {largest:.3g}, beyond the largest {self.dtype} "
                             f"({beyond:.3g}); scale it down or use dtype float64")
        if self.frame == "comoving" and not kernel.has_gauge_form:
            raise ValueError(f"kernel {kernel.name!r} is not of gauge form; use frame 'direct' or 'auto'")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def given_memory(self) -> int | None:
        """The bytes free for the run that its caller gave (``available_memory``); None when it was checked against
        what the host had free."""
        return getattr(self, "_given_memory", None)

    def memory_bytes(self, steps: int) -> int:
        """The bytes a run of ``steps`` steps needs (``psattn.meanfield.memory.estimate_bytes``)."""
        direct = self.frame == "direct" or self.kernel.name == "pair"
        return estimate_bytes(n=self.n, d=self.d, batch=self.batch, steps=steps, n_records=self.n_records,
                              item_bytes=self.torch_dtype.itemsize, direct=direct, keep_states=self.keep_states,
                              gauges=self.kernel.name in GAUGE_KERNELS)

    def record_bytes(self, steps: int) -> int:
        """The bytes its summary record holds (``psattn.meanfield.memory.record_bytes``), a part of ``memory_bytes``
        that ``run_experiments`` keeps for every run of its list."""
        return record_bytes(n=self.n, d=self.d, batch=self.batch, steps=steps, n_records=self.n_records)

    def step_size(self) -> tuple[float, int]:
        """(η, number of steps): the β-aware USA step (if enabled), shrunk so steps·η = tau; a ValueError
        when the steps are not finite or more than ``MAX_STEPS``, or η is beyond the dtype's largest value (it
        would be infinite at its first use)."""
        eta = usa_step_size(self.dt, self.beta) if self.dynamics == "usa" and self.beta_aware_step else self.dt
        ratio = self.tau / eta if eta > 0 else math.inf
        if not ratio <= MAX_STEPS:
            raise ValueError(f"tau = {self.tau:g} in steps of {eta:.3g} takes {ratio:.3g} steps, more than "
                             f"{MAX_STEPS:,}: raise dt or lower tau (or beta, which shrinks the USA step)")
        steps = max(1, math.ceil(ratio - 1e-9))
        largest = torch.finfo(self.torch_dtype).max
        if self.tau / steps > largest:
            raise ValueError(f"dt = {self.dt:g} makes a step of {self.tau / steps:.3g}, beyond the largest {self.dtype} "
                             f"({largest:.3g}); lower dt or use dtype float64")
        return self.tau / steps, steps

    def to_dict(self) -> dict[str, Any]:
        """The config as plain values, for JSON."""
        return asdict(self)


def default_labels(config: SimulationConfig) -> tuple[float, ...]:
    """The particles' labels when none are given: positions for positional kernels, else the kernel's."""
    n, kernel = config.n, config.kernel
    if kernel.name in POSITIONAL_KERNELS:
        return tuple(float(i) for i in range(n))
    if kernel.name == "prefix":
        return tuple(float(i * kernel.n_prompts // n) for i in range(n))
    if kernel.name == "gauge":
        m = len(kernel.gauges)  # type: ignore[arg-type]
        return tuple(float(i * m // n) for i in range(n))
    return tuple(0.0 for _ in range(n))


def _table(values: Any, name: str) -> torch.Tensor:
    """A config's nested list of numbers (gauges, label factor, pair matrices) as a float64 tensor, or a
    ValueError naming the field."""
    try:
        return torch.as_tensor(values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"kernel {name} must be a nested list of numbers of one shape, got {reprlib.repr(values)}") from None


def build_kernel(config: SimulationConfig) -> LabelledKernel:
    """Evaluate the configured kernel on the run's labels (float64)."""
    if not isinstance(config, SimulationConfig):  # an AttributeError on .kernel
        raise TypeError(f"build_kernel takes a SimulationConfig, got {type(config).__name__}")
    kc, n, d = config.kernel, config.n, config.d
    labels = config.labels if config.labels is not None else default_labels(config)
    if kc.name == "usa":
        if any(v != labels[0] for v in labels):
            raise ValueError("kernel 'usa' has a single label; labels must all be equal")
        return replace(plain_kernel(n, d), labels=torch.tensor(labels, dtype=torch.float64))  # the given label, not 0
    if kc.name == "rope":
        return rope_kernel(labels, d, kc.resolved_frequencies())
    if kc.name == "generalised_rope":
        return generalised_rope_kernel(labels, d, kc.planes, kc.resolved_frequencies())
    if kc.name == "cosine_toeplitz":
        return cosine_toeplitz_kernel(labels, d, kc.omega)
    if kc.name == "distance_bias":
        return distance_bias_kernel(labels, d, kc.decay)
    if kc.name == "prefix":
        return prefix_kernel(labels, d, kc.n_prompts, kc.gauge_seed)
    label_factor = None if kc.label_factor is None else _table(kc.label_factor, "label_factor")
    if kc.name == "gauge":
        gauges = _table(kc.gauges, "gauges")
        if gauges.ndim != 3 or gauges.shape[1:] != (d, d):
            raise ValueError(f"gauges must have shape (m, {d}, {d}), got {tuple(gauges.shape)}")
        return gauge_kernel(labels, gauges, label_factor)
    pairs = _table(kc.pair_matrices, "pair_matrices")
    if pairs.shape != (n, n, d, d):
        raise ValueError(f"pair matrices must have shape ({n}, {n}, {d}, {d}), got {tuple(pairs.shape)}")
    kernel = pair_kernel(pairs, label_factor)  # labels 0..n−1 unless given (they only group tokens in diagnostics)
    return kernel if config.labels is None else replace(kernel, labels=torch.tensor(labels, dtype=torch.float64))
