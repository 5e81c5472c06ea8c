"""What a certificate is: a registered check of one claim against an operator under test."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from psattn.theory.operators import OperatorUnderTest

METHODS = ("symbolic", "numeric", "symbolic + numeric")


class Evidence:
    """The sub-checks of one certificate. It passes when every check passed and there was at least
    one (so that a certificate cannot pass by checking nothing)."""

    def __init__(self) -> None:
        self.items: list[tuple[bool, str]] = []

    def check(self, ok, what: str) -> bool:
        """Record whether ``ok`` held for ``what``; returns it."""
        ok = bool(ok)
        self.items.append((ok, what))
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.items) and all(ok for ok, _ in self.items)

    def details(self) -> str:
        """Every recorded check in one line."""
        return "; ".join(("ok: " if ok else "FAILED: ") + what for ok, what in self.items)

    def failures(self) -> list[str]:
        """The checks that failed."""
        return [what for ok, what in self.items if not ok]


def operator_free(derive: Callable[[Evidence], None]) -> Callable[[Evidence], None]:
    """``derive(ev)``, checks that read no operator (a symbolic derivation), run once per process: later
    calls record the same checks into their ``Evidence`` (every operator a certificate runs on shares them)."""
    @functools.cache
    def checks() -> tuple[tuple[bool, str], ...]:
        ev = Evidence()
        derive(ev)
        return tuple(ev.items)

    @functools.wraps(derive)
    def record(ev: Evidence) -> None:
        for ok, what in checks():
            ev.check(ok, what)
    return record


@dataclass(frozen=True)
class CertificateSpec:
    """A certificate: its name, statement, method and check function."""
    name: str
    statement: str
    method: str
    check: Callable[[OperatorUnderTest, Evidence], None]


@dataclass
class Certificate:
    """The result of checking one claim: a pass/fail with the evidence behind it."""

    name: str
    statement: str
    method: str
    operator: str
    passed: bool
    details: str
    seconds: float
    failures: list[str] = field(default_factory=list)
    error: str | None = None  # an exception raised by the check (then passed is False)

    def to_dict(self) -> dict[str, Any]:
        """The certificate's result as plain values, for JSON."""
        return asdict(self)


REGISTRY: dict[str, CertificateSpec] = {}


def certificate(name: str, statement: str, method: str):
    """Register ``fn(op, evidence)`` as the certificate ``name``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")

    def register(fn: Callable[[OperatorUnderTest, Evidence], None]):
        if name in REGISTRY:
            raise ValueError(f"certificate {name!r} registered twice")
        REGISTRY[name] = CertificateSpec(name, statement, method, fn)
        return fn

    return register
