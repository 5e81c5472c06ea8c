"""Mean-field attention with frozen auxiliary labels (USA-AV, arXiv 2605.30229).

Files, one idea each (the command line, ``psattn meanfield run`` / ``reproduce``, is
``psattn.commands.meanfield``):

- ``gauges``         orthogonal gauges G(ξ): RoPE, generalised RoPE, random orthogonal (prefix tokens)
- ``kernels``        LabelledKernel (label factor c, gauges or pair matrices) and its builders
- ``dynamics``       USA/SA velocity fields (co-moving fast path, direct reference path), energy
- ``integrators``    Euler + renormalisation, tangent RK4 + retraction, the β-aware step
- ``diagnostics``    collapse and conditional-collapse diagnostics
- ``energy_monitor`` energy monotonicity check, staircase plateaus
- ``config``         SimulationConfig / KernelConfig
- ``simulate``       simulate(config) -> Trajectory
- ``experiments``    the paper's sweep, its JSON summary and saved states
- ``universality``   target laws and the RoPE-position / prefix-gauge constructions of Theorems 2 and 4
- ``distances``      W1 on the circle, energy distance on the sphere
- ``metastability``  two-cluster plateau lifetimes against β, the argmax_k k² I_k(β) cluster count
- ``theorems``       numerical checks of the theorems (pass/fail, with figure data)
- ``plots``          figures and the GIF from saved results
- ``reproduce``      the whole set: report.md, figures, JSON
- ``memory``         whether a run fits in memory, from its config
- ``staging``        the staging folder a run's files are written into before they are moved in
"""

from psattn.meanfield.config import KernelConfig, SimulationConfig, build_kernel
from psattn.meanfield.kernels import LabelledKernel
from psattn.meanfield.simulate import Trajectory, simulate

__all__ = ["KernelConfig", "LabelledKernel", "SimulationConfig", "Trajectory", "build_kernel", "simulate"]
