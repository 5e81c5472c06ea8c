"""The registry of declared studies: name -> ``Study`` (``psattn.experiments.study``), each declared in
its own module of ``psattn.experiments.studies``. ``psattn sweep NAME`` runs one; the reproduction runs
those its plan includes (``psattn.experiments.induction_report.LEFT_OUT`` says which it leaves out)."""

from __future__ import annotations

from psattn.experiments.studies import (
    gamma_depth,
    induction,
    paper_form,
    paper_scale,
    text,
    text_corpora,
    text_mlp,
    text_phase,
    text_pilot,
    text_scale,
    two_layer,
)
from psattn.experiments.study import Study

STUDIES: dict[str, Study] = {study.name: study for module in (
    induction, text, text_corpora, text_pilot, text_phase, text_mlp, paper_form, gamma_depth, two_layer, paper_scale, text_scale,
) for study in module.STUDIES}
