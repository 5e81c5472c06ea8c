"""The documentation site builds in strict mode: every page in the nav exists, every link resolves, and
every docstring of the API reference renders (mkdocs.yml sets strict). The built pages show no raw TeX
(formulas are typeset by the KaTeX the site serves, never fetched from elsewhere) and no list run into
the paragraph before it."""

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_site_builds_strictly_and_has_every_api_page(site):
    pages = {p.parent.name for p in (site / "api").glob("*/index.html")}
    assert pages == {"ops", "models", "data", "training", "experiments", "export", "hf", "theory", "meanfield"}
    shear = (site / "api" / "ops" / "index.html").read_text()
    assert "psattn.ops.shear" in shear and "sequence_starts" in shear  # the docstrings are rendered


#: modules the pages name that are the command line's plumbing or the package's face, not API reference material
NOT_IN_THE_REFERENCE = {"psattn", "psattn.arguments", "psattn.cli", "psattn.fields", "psattn.provenance", "psattn.version"}


def test_every_module_a_page_names_has_its_api_reference():
    """A module the README or a page names in code (`psattn.integrations.hf.support.TESTED`, say) is rendered by
    one of docs/api/*.md, so the reader who looks it up finds it (hf.support, hf.detect, run_parts and
    fused_attention were named but not rendered); so is every declared study's module (text_mlp's was not)."""
    modules = {".".join(p.relative_to(ROOT / "src").with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "src" / "psattn").rglob("*.py")}
    rendered = {m for page in (ROOT / "docs" / "api").glob("*.md")
                for m in re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M)}
    missing = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for code in re.findall(r"`([^`]+)`", page.read_text()):
            for dotted in re.findall(r"\bpsattn(?:\.\w+)+", code):
                parts = dotted.split(".")
                module = next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules)
                if module not in rendered | NOT_IN_THE_REFERENCE:
                    missing.setdefault(module, set()).add(page.name)
    assert not missing, missing
    studies = {m for m in modules if m.startswith("psattn.experiments.studies.")}
    assert studies <= rendered, studies - rendered


class _VisibleText(HTMLParser):
    """The text a reader sees as prose: outside code, scripts and the formulas KaTeX typesets."""

    VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
    HIDDEN = {"code", "pre", "script", "style", "kbd", "samp"}

    def __init__(self):
        super().__init__()
        self.hidden: list[bool] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            classes = (dict(attrs).get("class") or "").split()
            self.hidden.append(tag in self.HIDDEN or "arithmatex" in classes)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.hidden:
            self.hidden.pop()

    def handle_data(self, data):
        if not any(self.hidden):
            self.parts.append(data)


#: TeX a reader should never see: a sub- or superscript group, a command, or a group glued to a letter (what is
#: left of ``q_{t-1}`` once Markdown has taken its underscores for emphasis)
RAW_TEX = re.compile(r"_\{|\^\{|\\[A-Za-z]+|[^\W\d_][\u0300-\u036f]?\{")


def test_no_page_shows_raw_tex_or_a_list_run_into_a_paragraph(site):
    raw, glued = [], []
    for page in sorted(site.rglob("*.html")):
        html = page.read_text()
        reader = _VisibleText()
        reader.feed(html)
        text = "".join(reader.parts)
        raw += [f"{page.relative_to(site)}: ...{text[max(0, m.start() - 30):m.end() + 30]}..." for m in RAW_TEX.finditer(text)]
        glued += [f"{page.relative_to(site)}: {m.group(1)[:80]!r}" for m in re.finditer(r"<p>(.*?)</p>", html, flags=re.S)
                  if re.search(r"\n\s*(?:[-*+]|\d+\.) ", m.group(1))]
    assert not raw, "\n".join(raw[:20])
    assert not glued, "\n".join(glued[:20])


def test_formulas_are_typeset_by_katex_served_from_the_site(site):
    page = (site / "getting-started" / "index.html").read_text()
    assert r'<span class="arithmatex">\(\hat q_t = q_t' in page  # marked for KaTeX, not left to Markdown
    for asset in re.findall(r'<(?:script src|link href)="([^"]*katex[^"]*)"', page):
        assert not asset.startswith(("http:", "https:", "//")), asset  # nothing from a CDN
        assert (site / "getting-started" / asset).resolve().is_file(), asset
    css = (site / "assets" / "katex" / "katex.min.css").read_text()
    fonts = set(re.findall(r"url\((fonts/[^)]+\.woff2)\)", css))
    assert fonts and all((site / "assets" / "katex" / font).is_file() for font in fonts)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).replace("&quot;", '"')


def test_the_api_pages_show_dataclass_fields_signatures_and_undocumented_names(site):
    models = _text((site / "api" / "models" / "index.html").read_text())
    assert "vocab_size: int = 64" in models and "attention: AttentionConfig | list[AttentionConfig] = AttentionConfig()" in models
    training = _text((site / "api" / "training" / "index.html").read_text())
    assert "steps: int = 1000" in training and 'precision: Literal["fp32", "bf16"] = "fp32"' in training
    assert "RunResult" in training and "TrainState" in training  # shown whether or not they have a docstring
    ops = _text((site / "api" / "ops" / "index.html").read_text())  # Google-style sections, and the examples
    assert "Parameters: Name Type Description Default q Tensor post-RoPE queries" in ops
    assert "&gt;&gt;&gt; out = psa_attention(" in ops


def test_search_indexes_greek_letters_and_papers_are_links(site):
    import json

    index = json.loads((site / "search" / "search_index.json").read_text())
    assert "trimmer" not in index["config"]["pipeline"]  # lunr's trimmer strips γ down to nothing
    assert any("γ" in doc["text"] for doc in index["docs"])
    home = (site / "index.html").read_text()
    assert 'href="https://arxiv.org/abs/2609.32319"' in home and "pip install" in home


def test_the_cli_reference_page_is_every_command_s_help_from_the_parser(site, monkeypatch):
    import html

    monkeypatch.setenv("COLUMNS", "86")  # the width the build writes the help at
    from psattn.cli import build_parser

    reference = __import__("runpy").run_path(str(ROOT / "scripts" / "cli_reference.py"))
    page = html.unescape((site / "cli" / "index.html").read_text())
    found = list(reference["commands"](build_parser()))
    assert {" ".join(path) for path, _, _ in found} >= {"train", "generate", "footprint", "configs", "hf-demo", "certify",
                                                          "theory gamma-c", "meanfield run"}
    for _, _, parser in found:
        assert parser.format_help().rstrip() in page, parser.prog
