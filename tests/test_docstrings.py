"""Every public module, class, function and method of the API reference's modules has a docstring (the
reference shows every public name, with or without one)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def documented_modules() -> list[str]:
    """The modules the API pages render (their ``::: module`` lines)."""
    return [m for page in sorted((ROOT / "docs" / "api").glob("*.md"))
            for m in re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M)]


def without_docstring() -> set[str]:
    griffe = pytest.importorskip("griffe")
    package = griffe.GriffeLoader(search_paths=[str(ROOT / "src")]).load("psattn")
    missing: set[str] = set()

    def walk(obj) -> None:
        for name, member in obj.members.items():
            if member.is_alias or name.startswith("_") or member.kind.value not in ("function", "class"):
                continue
            if not member.docstring:
                missing.add(member.path)
            if member.kind.value == "class":
                walk(member)

    for module in documented_modules():
        obj = package if module == "psattn" else package[module.removeprefix("psattn.")]
        if not obj.docstring:
            missing.add(module)
        walk(obj)
    return missing


def test_every_public_name_of_the_api_reference_has_a_docstring():
    missing = sorted(without_docstring())
    assert not missing, f"public names without a docstring: {missing}"
