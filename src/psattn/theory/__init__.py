"""Theory of Phase Space Attention (arXiv 2609.32319): the critical-coupling law and the reduced Gaussian
score model, scaling exponents, spectral analysis, and machine-checkable certificates.

- ``.transition``: gamma_c(d_k, T), its branches and crossover d_k* = 8 log(T - 1);
- ``.reduced_model``: Monte-Carlo simulation of the T4-only reduction and its comparison with gamma_c;
- ``.scaling``: power-law exponents of gamma_c in d_k (reduced model, trained-model sweeps);
- ``.spectral``: H(z) = (1 + gamma) - gamma z^-1, the joint score filter, measured Bode plots;
- ``.certificates``: the certificates (needs SymPy), run against an operator from ``.operators``;
- ``.plots``, ``.report``: figures (needs matplotlib) and the report section (``theory_report``);

Its command-line entry points are in ``psattn.commands.theory``. The names below are imported on first use
(PEP 562), so that a command reading ``.transition`` or ``.scaling`` alone does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psattn.lazy import lazy_names

if TYPE_CHECKING:
    from psattn.theory.reduced_model import ReducedModel, TransitionComparison, compare_with_theory, simulate_transition
    from psattn.theory.report import theory_report
    from psattn.theory.scaling import PowerLawFit, empirical_exponent, fit_power_law, load_sweep_results, reduced_model_exponent
    from psattn.theory.spectral import (
        BodeCurves,
        MeasuredBode,
        filter_order,
        joint_response,
        measure_bode,
        shear_response,
        variant_bode,
    )
    from psattn.theory.transition import (
        C_CONSTANT,
        annealed_roots,
        crossover_dk,
        crossover_jump,
        gamma_c,
        gamma_c_squared,
        log_distractors,
        transition_branch,
    )

#: each name below -> the module that defines it
_NAMES = {
    **dict.fromkeys(("ReducedModel", "TransitionComparison", "compare_with_theory", "simulate_transition"),
                    "psattn.theory.reduced_model"),
    "theory_report": "psattn.theory.report",
    **dict.fromkeys(("PowerLawFit", "empirical_exponent", "fit_power_law", "load_sweep_results",
                     "reduced_model_exponent"), "psattn.theory.scaling"),
    **dict.fromkeys(("BodeCurves", "MeasuredBode", "filter_order", "joint_response", "measure_bode", "shear_response",
                     "variant_bode"), "psattn.theory.spectral"),
    **dict.fromkeys(("C_CONSTANT", "annealed_roots", "crossover_dk", "crossover_jump", "gamma_c", "gamma_c_squared",
                     "log_distractors", "transition_branch"), "psattn.theory.transition"),
}

__all__ = [
    "BodeCurves", "C_CONSTANT", "MeasuredBode", "PowerLawFit", "ReducedModel", "TransitionComparison",
    "annealed_roots", "compare_with_theory", "crossover_dk", "crossover_jump", "empirical_exponent",
    "filter_order", "fit_power_law", "gamma_c", "gamma_c_squared", "joint_response", "load_sweep_results",
    "log_distractors", "measure_bode", "reduced_model_exponent", "theory_report", "shear_response",
    "simulate_transition", "transition_branch", "variant_bode",
]


__getattr__, __dir__ = lazy_names(__name__, _NAMES)
