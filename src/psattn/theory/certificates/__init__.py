"""Machine-checkable certificates of the PSA claims (arXiv 2609.32319), run against an operator under test.

    from psattn.theory.certificates import run_certificates
    results = run_certificates()                     # the library's operator: all pass
    run_certificates(MUTANTS["wrong_sign"])          # a broken one: some fail

Each result is a ``Certificate`` (name, statement, method, passed, details). The checks live
in ``.algebra`` (four-term score, symplecticity, Hamiltonian flow, kinetic energy, uniqueness),
``.filters`` (filter orders, DC and high-pass gains, causality, RoPE placement, INT8 headroom),
``.deployment`` (cache equivalence, FLOPs per token) and ``.law`` (the transition law).
"""

from __future__ import annotations

import time
import traceback

import torch

from psattn.theory.certificates import algebra, deployment, filters, law  # noqa: F401  (registers the checks)
from psattn.theory.certificates.base import REGISTRY, Certificate, CertificateSpec, Evidence, certificate
from psattn.theory.operators import MUTANTS, REFERENCE, OperatorUnderTest

#: The order of the claims in the issue: the algebra, the filter, the theory, then deployment.
ORDER = [
    "four_term_decomposition", "symplecticity", "hamiltonian_flow", "kinetic_energy", "filter_order_gap",
    "dc_neutral_high_pass", "causality", "uniqueness", "coriolis_placement", "transition_law",
    "cache_equivalence", "flops_per_token", "int8_headroom",
]


def certificate_names() -> list[str]:
    """Every registered certificate, in ``ORDER`` (any others after it)."""
    return [n for n in ORDER if n in REGISTRY] + [n for n in REGISTRY if n not in ORDER]


def run_certificate(spec: CertificateSpec, op: OperatorUnderTest = REFERENCE) -> Certificate:
    """Run one certificate on ``op``: its evidence, verdict and time (an exception fails it)."""
    ev = Evidence()
    start = time.perf_counter()
    error = None
    try:
        spec.check(op, ev)
    except Exception as err:  # a crash is a failure, recorded with its traceback
        error = "".join(traceback.format_exception_only(type(err), err)).strip()
    seconds = time.perf_counter() - start
    passed = ev.passed and error is None
    details = ev.details() + (f"; ERROR: {error}" if error else "")
    return Certificate(spec.name, spec.statement, spec.method, op.name, passed, details, seconds,
                       ev.failures(), error)


def run_certificates(op: OperatorUnderTest = REFERENCE, names: list[str] | None = None) -> list[Certificate]:
    """Run the named certificates (all by default, in ``ORDER``) against ``op``, on one
    intra-op thread (their tensors are tiny; more threads only add contention), restoring the
    thread count afterwards."""
    if not isinstance(op, OperatorUnderTest):  # an AttributeError on op.name, after the first check had run
        raise TypeError(f"op must be an OperatorUnderTest (psattn.theory.operators.REFERENCE or MUTANTS[name]), "
                        f"got {type(op).__name__}")
    if isinstance(names, str):  # read letter by letter: "unknown certificates ['c', 'e', ...]"
        raise TypeError(f"names must be a list of certificate names, got the string {names!r}; use [{names!r}]")
    names = list(dict.fromkeys(names)) if names else None  # a name given twice runs once, in first-given order
    unknown = set(names or ()) - set(REGISTRY)
    if unknown:
        raise ValueError(f"unknown certificates {sorted(unknown)}; known: {list(REGISTRY)}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [run_certificate(REGISTRY[n], op) for n in (names or certificate_names())]
    finally:
        torch.set_num_threads(threads)


def format_table(results: list[Certificate], details: bool = False) -> str:
    """A plain-text table: one row per certificate (and its evidence when ``details``); of no results, the
    header and a line saying none was run."""
    width = max((len(r.name) for r in results), default=len("certificate"))  # max() of none raised a ValueError
    lines = [f"{'#':>2}  {'certificate':<{width}}  {'method':<18}  {'result':<6}  {'seconds':>7}"]
    for i, r in enumerate(results, 1):
        lines.append(f"{i:>2}  {r.name:<{width}}  {r.method:<18}  {'PASS' if r.passed else 'FAIL':<6}  {r.seconds:7.2f}")
        for line in (r.details.split("; ") if details else r.failures + ([f"ERROR: {r.error}"] if r.error else [])):
            lines.append(f"{'':>4}{'':<{width}}  - {line}")
    passed = sum(r.passed for r in results)
    lines.append(f"{passed}/{len(results)} certificates passed for operator {results[0].operator!r}" if results
                 else "no certificate was run")
    return "\n".join(lines)


__all__ = ["Certificate", "CertificateSpec", "Evidence", "MUTANTS", "REFERENCE", "REGISTRY", "certificate",
           "certificate_names", "format_table", "run_certificate", "run_certificates"]
