"""Rebuild the shipped Jane Austen corpus (src/psattn/textdata/corpora/austen) from Debian's package.

Debian's ``r-cran-janeaustenr`` ships the six novels as an R lazy-load database; this reads it
with the ``rdata`` parser (no R needed) and writes one xz-compressed UTF-8 file per novel, one
line of the original per line. Run once, by hand; nothing at run time needs it::

    apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb pkg
    pip install rdata && python scripts/make_austen_corpus.py pkg
"""

from __future__ import annotations

import gzip
import lzma
import sys
import zlib
from pathlib import Path

import rdata

NOVELS = {  # R object name -> file name (year of first publication)
    "sensesensibility": "1811-sense-and-sensibility", "prideprejudice": "1813-pride-and-prejudice",
    "mansfieldpark": "1814-mansfield-park", "emma": "1815-emma",
    "northangerabbey": "1817-northanger-abbey", "persuasion": "1817-persuasion",
}


def read_lazy_load_db(base: Path) -> dict[str, list[str]]:
    """R's lazy-load database: .rdx is a gzip'd index of (offset, length) per object in .rdb, each
    object a 4-byte length followed by a zlib stream of R's serialisation format."""
    index = rdata.conversion.convert(rdata.parser.parse_data(gzip.decompress(base.with_suffix(".rdx").read_bytes())))
    blob = base.with_suffix(".rdb").read_bytes()
    novels = {}
    for name, (offset, length) in index["variables"].items():
        data = zlib.decompress(blob[offset + 4 : offset + length])
        novels[str(name)] = [str(line) for line in rdata.conversion.convert(rdata.parser.parse_data(data))]
    return novels


def main(package_root: str) -> None:
    base = Path(package_root) / "usr/lib/R/site-library/janeaustenr/data/Rdata"
    out = Path(__file__).resolve().parents[1] / "src/psattn/textdata/corpora/austen"
    for name, lines in read_lazy_load_db(base).items():
        text = "\n".join(lines).strip() + "\n"
        (out / f"{NOVELS[name]}.txt.xz").write_bytes(lzma.compress(text.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
        print(f"{NOVELS[name]}: {len(text.split()):,} words")


if __name__ == "__main__":
    main(sys.argv[1])
