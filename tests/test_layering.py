"""The import layering of docs/architecture.md, checked on the source: a package imports only from
its own layer and the layers below it; the data (tasks, text data) never imports models, training or
anything above; theory and meanfield are leaves; the transformers bridge (integrations) imports only
the operator and the models; nothing imports the package face
(``psattn/__init__.py``), which is for users, nor a deprecated shim (``psattn.text``), which is kept
for users' old imports; no two modules import each other, directly or through others; and docs/layout.md lists
the modules in an order that keeps to it."""

import ast
import graphlib
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "psattn"

#: top-level module or package of psattn -> layer; a module may import its own layer and lower ones
LAYERS = {
    "version": 0, "fields": 0, "jsonfile": 0, "files": 0, "provenance": 0, "timing": 0, "progress": 0, "figures": 0,
    "arguments": 0, "processes": 0, "lazy": 0,
    "ops": 1, "tasks": 1, "textdata": 1,
    "models": 2,
    "training": 3,
    "export": 4, "integrations": 4,
    "experiments": 5,
    "commands": 6, "cli": 6, "__main__": 6,
}
#: deprecated shims: old import paths kept for one release, which re-export names from models and training
#: with a DeprecationWarning; nothing of psattn imports them
SHIMS = {"text": 4}
LAYERS.update(SHIMS)
#: the data: synthetic tasks and real text as token streams; they import layer 0 and each other only
DATA = {"tasks", "textdata"}
#: leaves: what they may import (besides themselves)
LEAVES = {
    "theory": {"version", "fields", "jsonfile", "files", "provenance", "timing", "progress", "figures", "arguments",
               "processes", "lazy", "ops", "models"},
    "meanfield": {"version", "fields", "jsonfile", "files", "provenance", "timing", "progress", "figures", "arguments",
                  "processes"},
}
for leaf in LEAVES:
    LAYERS[leaf] = 4  # importable by the layers from 4 up: export, integrations, experiments, the commands
#: bridges to other libraries: what they may import besides layer 0 and themselves (the transformers bridge
#: needs the operator and the model, never training: exporting a trained run is export's)
BRIDGES = {"integrations": {"ops", "models"}}


def top(module: str) -> str | None:
    """``psattn.a.b`` -> ``a``; the face ``psattn`` -> ""; another library -> None."""
    parts = module.split(".")
    if parts[0] != "psattn":
        return None
    return parts[1] if len(parts) > 1 else ""


def imports(path: Path) -> set[str]:
    """Every psattn module ``path`` imports (at the top or inside functions), as top-level names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {t for t in map(top, names) if t is not None}
    return found


def sources():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts == ("__init__.py",):
            continue  # the face imports what it shows users
        yield rel.parts[0].removesuffix(".py"), path


@pytest.mark.parametrize("owner,path", list(sources()), ids=lambda x: str(x.relative_to(SRC)) if isinstance(x, Path) else x)
def test_imports_follow_the_layers(owner, path):
    assert owner in LAYERS, f"{owner} has no layer: add it to docs/architecture.md and to LAYERS here"
    for imported in imports(path) - {owner}:
        assert imported != "", f"{path.relative_to(SRC)} imports the package face; import the module that defines the name"
        assert imported not in SHIMS, f"{path.relative_to(SRC)} imports psattn.{imported}, a deprecated shim: import the new home"
        if owner in LEAVES:
            assert imported in LEAVES[owner], f"{path.relative_to(SRC)} ({owner}, a leaf) imports {imported}"
        elif owner in BRIDGES:
            assert imported in BRIDGES[owner] or LAYERS[imported] == 0, (
                f"{path.relative_to(SRC)} ({owner}, a bridge) imports {imported}: it may import {sorted(BRIDGES[owner])}")
        elif owner in DATA:
            assert imported in DATA or LAYERS[imported] == 0, (
                f"{path.relative_to(SRC)} ({owner}, data) imports {imported}: data never imports the operator, "
                "models or training")
        else:
            assert LAYERS[imported] <= LAYERS[owner], (
                f"{path.relative_to(SRC)} (layer {LAYERS[owner]}) imports {imported} (layer {LAYERS[imported]})")


def test_relative_imports_are_not_used():
    relative = [str(p.relative_to(SRC)) for _, p in sources()
                if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(p.read_text())))]
    assert relative == []


def module_name(path: Path, root: Path = SRC) -> str:
    """``src/psattn/a/b.py`` -> ``psattn.a.b``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """psattn module -> the psattn modules it imports (at the top or inside functions): ``from p import
    m`` names the submodule ``p.m`` when there is one, else the package ``p``."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in paths:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                          for a in node.names}
        graph[name] = found - {name}
    return graph


def test_no_module_imports_itself_through_others():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as e:
        pytest.fail("import circle: " + " -> ".join(e.args[1]))


def test_the_circle_check_sees_a_circle_through_a_function_level_import(tmp_path):
    package = tmp_path / "psattn"
    (package / "p").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "p" / "__init__.py").write_text("")
    (package / "p" / "a.py").write_text("from psattn.p.b import g\n")
    (package / "p" / "b.py").write_text("def g():\n    from psattn.p import a\n")
    graph = import_graph(package)
    assert graph["psattn.p.a"] == {"psattn.p.b"} and graph["psattn.p.b"] == {"psattn.p.a"}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


def layout_listing() -> list[set[str]]:
    """The top-level modules and packages docs/layout.md lists under ``src/psattn/``, in its order: one set a
    line of the listing (the small utilities share one), the shipped data (``data/``) and subfolders left out."""
    block = (SRC.parents[1] / "docs" / "layout.md").read_text().split("```\n", 2)[1]
    listing = block.split("src/psattn/", 1)[1].split("\nbenchmarks/", 1)[0]
    groups = []
    for line in listing.splitlines()[1:]:
        if not line.startswith("  ") or line.startswith("   "):
            continue  # a description's continuation, or a subfolder
        first = line.split()[0]
        if first.endswith(".py") and " " in line.strip() and all(w.endswith(".py") for w in line.split()):
            groups.append({w.removesuffix(".py") for w in line.split()})  # the utilities' line
        elif "/" not in first.rstrip("/") and first != "data/":
            groups.append({first.rstrip("/").removesuffix(".py")})
    return groups


def test_the_layout_page_lists_every_module_after_those_it_imports():
    """docs/layout.md lists src/psattn's layers lowest first, "a layer imports only itself and those above it":
    it listed tasks before textdata and export before integrations, which they import, and left out lazy.py."""
    groups = layout_listing()
    listed = set().union(*groups)
    assert listed == set(LAYERS) - {"__main__"}, sorted(listed ^ (set(LAYERS) - {"__main__"}))
    for i, group in enumerate(groups):
        for owner, path in sources():
            if owner in group:
                later = (imports(path) - group - {""}) & set().union(*groups[i + 1:])
                assert not later, f"{path.relative_to(SRC)} imports {sorted(later)}, listed below it in docs/layout.md"


def _named_in_layout() -> list[tuple[Path, str]]:
    """(folder, name) for every ``.py`` and ``.sh`` file docs/layout.md's listing names: the folder is the top-level
    one the line sits under and, below ``src/psattn/``, the package; a name with a slash is read from src/psattn."""
    root = SRC.parents[1]
    block = (root / "docs" / "layout.md").read_text().split("```\n", 2)[1]
    named, top, package = [], root, root
    for line in block.splitlines():
        if line and not line.startswith(" "):
            top = package = root / line.split()[0]
        elif top == SRC and line.startswith("  ") and not line.startswith("   "):
            first = line.split()[0]
            package = SRC / first if first.endswith("/") else SRC
        for name in re.findall(r"[\w/]+\.(?:py|sh)\b", line):
            named.append((SRC if "/" in name else package, name))
    return named


def test_every_file_the_layout_page_names_is_where_it_says():
    """docs/layout.md names some forty files (run_dir.py, gpu_check.sh, helpers.py, ...) in the folder each sits in;
    only the top-level modules' names were checked, so a file moved or renamed left the page naming a file that is
    not there."""
    named = _named_in_layout()
    assert len(named) > 40
    missing = [f"{folder.name}/{name}" for folder, name in named
               if not (folder / name).exists() and not any(folder.rglob(name))]
    assert not missing, missing


def test_the_layout_page_lists_every_study_module_and_every_command_module():
    """docs/layout.md lists the declared studies' modules and the command families by name: a study or command
    added or removed left the list out of step, and no test compared them."""

    block = (SRC.parents[1] / "docs" / "layout.md").read_text().split("```\n", 2)[1]
    studies = re.search(r"induction studies, which share one Plan; (.*?)\)", " ".join(block.split())).group(1)
    commands = re.search(r"handlers: (.*?)\s+cli\.py", " ".join(block.split())).group(1)

    def modules(folder: Path) -> set[str]:
        return {p.stem for p in folder.glob("*.py")} - {"__init__"}

    assert {"induction", *studies.split(", ")} == modules(SRC / "experiments" / "studies")
    assert set(re.sub(r" \([^)]*\)", "", commands).split(", ")) == modules(SRC / "commands")
