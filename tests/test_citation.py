"""CITATION.cff is valid YAML with the fields CFF 1.2 requires, and cites every paper the README and the
papers page (docs/related-work.md) cite."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_cites_the_papers_of_the_readme():
    yaml = pytest.importorskip("yaml")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["message"] and citation["title"] and citation["authors"]
    cited = {i["value"].removeprefix("arXiv:") for r in citation["references"] for i in r["identifiers"]}
    text = (ROOT / "README.md").read_text() + (ROOT / "docs" / "related-work.md").read_text()
    in_readme = set(re.findall(r"arXiv (\d{4}\.\d{5})", text))
    assert in_readme and in_readme <= cited, in_readme - cited
