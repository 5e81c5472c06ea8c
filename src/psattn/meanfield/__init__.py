"""Mean-field attention with frozen auxiliary labels (USA-AV, SPEC Part 2).

Files, one idea each:

- ``gauges``         orthogonal gauges G(ξ): RoPE, generalised RoPE, random orthogonal (prefix tokens)
- ``kernels``        LabelledKernel (label factor c, gauges or pair matrices) and its builders
- ``dynamics``       USA/SA velocity fields (co-moving fast path, direct reference path), energy
- ``integrators``    Euler + renormalisation, tangent RK4 + retraction, the β-aware step
- ``diagnostics``    collapse and conditional-collapse diagnostics
- ``energy_monitor`` energy monotonicity check, staircase plateaus
- ``config``         SimulationConfig / KernelConfig
- ``simulate``       simulate(config) -> Trajectory
- ``experiments``    the paper's sweep and its JSON summary
- ``theorems``       numerical checks of the theorems (pass/fail)
- ``plots``          figures from saved summaries
"""

from psattn.meanfield.config import KernelConfig, SimulationConfig, build_kernel
from psattn.meanfield.kernels import LabelledKernel
from psattn.meanfield.simulate import Trajectory, simulate

__all__ = ["KernelConfig", "LabelledKernel", "SimulationConfig", "Trajectory", "build_kernel", "simulate"]
