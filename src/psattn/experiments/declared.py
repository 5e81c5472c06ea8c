"""The registry of declared experiments: name -> the function of the plan (``quick`` or ``full``) that
returns its run configs. Each is declared in its own module of ``psattn.experiments.studies``."""

from __future__ import annotations

from psattn.experiments.studies.gamma_depth import gamma_depth
from psattn.experiments.studies.induction import (
    associative_recall,
    critical_gamma,
    critical_gamma_head_dim,
    critical_gamma_width,
    gamma_sweep,
    init_sensitivity,
    key_lag,
    negative_controls,
    size_scan,
    variant_table,
)
from psattn.experiments.studies.paper_form import paper_form
from psattn.experiments.studies.paper_scale import paper_scale
from psattn.experiments.studies.text import text_experiment, text_seeds
from psattn.experiments.studies.text_phase import text_phase
from psattn.experiments.studies.text_pilot import text_pilot
from psattn.experiments.studies.text_scale import text_scale, text_scale_pilot
from psattn.experiments.studies.two_layer import two_layer

EXPERIMENTS = {
    "variants": variant_table,
    "key_lag": key_lag,
    "gamma_sweep": gamma_sweep,
    "controls": negative_controls,
    "mqar": associative_recall,
    "sizes": size_scan,
    "critical_gamma": critical_gamma,
    "critical_gamma_width": critical_gamma_width,
    "critical_gamma_head_dim": critical_gamma_head_dim,
    "init_sensitivity": init_sensitivity,
    "text": text_experiment,
    "text_seeds": text_seeds,
    "text_pilot": text_pilot,
    "text_phase": text_phase,
    "paper_form": paper_form,
    "gamma_depth": gamma_depth,
    "two_layer": two_layer,
    "paper_scale": paper_scale,
    "text_scale_pilot": text_scale_pilot,
    "text_scale": text_scale,
}
