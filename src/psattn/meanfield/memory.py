"""Whether a mean-field simulation fits in memory, decided from its config before anything is allocated.

A run holds its kernel on the n labels (the label factor c and |c|, (n, n), built in float64 and kept in
the run's dtype; a gauge kernel's gauges (n, d, d); in the direct frame every pair matrix A_ij, (n, n, d, d)), one
step's work (a few (B, n, n) Gram and weight matrices, RK4's stages of the state (B, n, d), and in the
direct frame the products A_ij x_j, (B, n, n, d)), and what it records: the energy at every step, the
diagnostics at every record and, when it keeps them, the states (R, B, n, d), and its summary record, made of them
while they are held (``record_bytes``: a Python number costs four times its float64). A run whose estimate exceeds
``MARGIN`` of the memory available (given by the caller, else what the host has free now, read as training reads
it: ``psattn.processes.host_available_bytes``) is refused in one line, where it would otherwise die in the allocator
or under the kernel's OOM killer.
"""

from __future__ import annotations

FLOAT64 = 8
GIB = 2**30
MARGIN = 0.8  # refuse what needs more than this share of the available memory (as training does)
N_DIAGNOSTICS = 8  # psattn.meanfield.diagnostics.DIAGNOSTIC_NAMES
#: the bytes of one number of a summary record: a Python float (24) and its place in a list (8); measured, 33
RECORD_NUMBER_BYTES = 36


def estimate_bytes(*, n: int, d: int, batch: int, steps: int, n_records: int, item_bytes: int, direct: bool,
                   keep_states: bool, gauges: bool = True) -> int:
    """The bytes a run of ``steps`` steps needs, from its sizes alone (an estimate, not a bound); ``item_bytes``
    per number of the run's dtype, ``direct`` when it integrates every pair matrix (the direct frame), ``gauges``
    when its kernel has per-token gauges (n, d, d) (the label-factor kernels, A = I, have none)."""
    records = min(n_records, steps + 1)  # records fall on distinct steps
    kernel = (FLOAT64 + item_bytes) * (2 * n * n + (n * d * d if gauges else 0) + (n * n * d * d if direct else 0))
    step = item_bytes * batch * (4 * n * n + 12 * n * d + (3 * n * n * d if direct else 0))
    kept = (item_bytes * batch + FLOAT64) * (steps + 1) + records * batch * item_bytes * (
        N_DIAGNOSTICS + (n * d if keep_states else 0))
    return kernel + step + kept + record_bytes(n=n, d=d, batch=batch, steps=steps, n_records=n_records)


def record_bytes(*, n: int, d: int, batch: int, steps: int, n_records: int) -> int:
    """The bytes a run's summary record (``psattn.meanfield.experiments.summarise``) holds as Python numbers: at
    each of its R records the time, the diagnostics and the energy, (R, B); the final diagnostics, (B,); the labels,
    (n,); the final state, (n, d). ``run_experiments`` keeps every run's until its summary is written."""
    records = min(n_records, steps + 1)
    numbers = records * (1 + (N_DIAGNOSTICS + 1) * batch) + N_DIAGNOSTICS * batch + n + n * d
    return RECORD_NUMBER_BYTES * numbers


def check_memory(need: int, available: int, what: str) -> None:
    """Refuse, in one line with the numbers, ``what`` when ``need`` bytes exceed ``MARGIN`` of ``available``."""
    if need > MARGIN * available:
        raise ValueError(f"the simulation does not fit in memory: {what} need about {need / GIB:,.1f} GiB, "
                         f"and {available / GIB:.1f} GiB is available")
