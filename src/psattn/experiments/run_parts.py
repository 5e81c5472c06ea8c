"""A run in progress as a few files small enough to come back from a GPU machine, and back.

A GPU sweep runs in pieces of a few minutes, each on a machine that is given back afterwards, and a
machine hands back at most 8 files of at most 16 MiB each from a command. A run cut by a piece's time
limit checkpoints there, and without its checkpoint the next machine would start it again, so a run
longer than one piece would never end. ``split_run`` writes the run directory's own files
(``psattn.training.run_dir.run_files``: config, meta, metrics, checkpoint, tokenizer and data
record) as one tar archive cut into parts of at most ``PART_BYTES``, named ``STEM.tar.00-of-03`` and
so on; ``join_run`` checks that every part is there and that the archive holds one run directory's
files and nothing else, then writes the directory back. Carried to the next machine, the directory
resumes the run exactly where it stopped (``psattn.training`` resumes from the checkpoint, whose
binding still names the config and data it trained on). A checkpoint too large to travel in
``max_parts`` parts (psa-92m's, with its optimiser state, is about 1 GB) stays behind, and that run
starts again on the next machine.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import tarfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import IO

from psattn.files import atomic_writes
from psattn.processes import new_staging, signals_unwind, tidy_staging
from psattn.training.run_dir import CHECKPOINT, run_files
from psattn.training.signals import stop_signals_held

#: bytes of one part: under the 16 MiB a GPU machine hands back per file
PART_BYTES = 15 * 2**20
#: parts one run may take: with a piece's summary archive and logs, within the 8 files and 64 MiB a command hands back
MAX_PARTS = 3
#: files and bytes a GPU machine hands back from one command
FILES_BACK, BYTES_BACK = 8, 64 * 2**20
PART_NAME = re.compile(r"^(?P<stem>[A-Za-z0-9_.-]+)\.tar\.(?P<index>\d{2})-of-(?P<count>\d{2})$")
RUN_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


def split_run(run_dir: str | Path, out_dir: str | Path, stem: str, *, part_bytes: int = PART_BYTES,
              max_parts: int = MAX_PARTS) -> list[Path]:
    """The run files of ``run_dir`` as parts ``out_dir/STEM.tar.NN-of-MM`` of at most ``part_bytes``
    each (returned), which replace an earlier split's parts of ``STEM`` there (of any count); none, and nothing
    written, when they would take more than ``max_parts``."""
    run_dir = Path(run_dir)
    files = [path for path in run_files(run_dir) if path.is_file()]
    if not files:
        raise ValueError(f"{run_dir} holds no run files to split")
    if sum(path.stat().st_size for path in files) > max_parts * part_bytes:  # too large, whatever the tar adds
        return []  # (a psa-92m run's checkpoint is about 1 GB: not read into memory for nothing)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in files:
            tar.add(path, arcname=f"{run_dir.name}/{path.name}")
    data = buffer.getvalue()
    count = -(-len(data) // part_bytes)
    if count > max_parts:
        return []
    parts = {Path(out_dir) / f"{stem}.tar.{index:02d}-of-{count:02d}": data[index * part_bytes:(index + 1) * part_bytes]
             for index in range(count)}

    @contextlib.contextmanager
    def replacing() -> Iterator[None]:  # the stop signals held, and an earlier split's parts of another count removed
        with stop_signals_held():
            yield
            for stale in Path(out_dir).glob(f"{glob.escape(stem)}.tar.*-of-*"):
                match = PART_NAME.match(stale.name)
                if match is not None and match["stem"] == stem and int(match["count"]) != count:
                    stale.unlink(missing_ok=True)

    # written whole, as a set (psattn.files): a full disk or a stop leaves no part cut short under its whole name
    atomic_writes({path: partial(_write, part) for path, part in parts.items()}, replacing=replacing)
    return list(parts)


def _write(data: bytes, f: IO[bytes]) -> None:
    f.write(data)


def is_part(path: str | Path) -> bool:
    """Whether ``path`` is named as a part of ``split_run``."""
    return PART_NAME.match(Path(path).name) is not None


def join_run(parts: list[str | Path], runs_dir: str | Path) -> Path:
    """Write the run directory that ``parts`` (every part of one ``split_run``, in any order) hold into
    ``runs_dir``, replacing the run files an earlier copy left there (all written beside it first, so a join
    that fails leaves that copy as it was, and moved in with the stop signals held, so a stop leaves one copy
    whole, and what a join killed outright left beside it is removed); returns the directory. A missing
    or foreign part, or an archive that holds anything but one run directory's files, is refused
    (ValueError) before anything is written."""
    if not parts:
        raise ValueError("no parts given")
    archives: dict[tuple[str, int], dict[int, Path]] = {}
    for part in map(Path, parts):
        match = PART_NAME.match(part.name)
        if match is None or int(match["index"]) >= int(match["count"]):
            raise ValueError(f"{part} is not named as a part of a run (STEM.tar.NN-of-MM, NN < MM)")
        held = archives.setdefault((match["stem"], int(match["count"])), {})
        if int(match["index"]) in held:  # two pieces' parts of the same name: their bytes must not mix
            raise ValueError(f"{part.name} is given twice ({held[int(match['index'])]} and {part}): give one piece's "
                             "parts at a time")
        held[int(match["index"])] = part
    if len(archives) != 1:
        raise ValueError(f"the parts belong to {len(archives)} different archives: {sorted(s for s, _ in archives)}")
    (stem, count), by_index = next(iter(archives.items()))
    missing = [f"{i:02d}" for i in range(count) if i not in by_index]
    if missing:
        raise ValueError(f"{stem}: part {', '.join(missing)} of {count:02d} is missing")
    data = b"".join(by_index[i].read_bytes() for i in range(count))
    members = _members(data, stem)
    run_dir = Path(runs_dir) / next(iter(members)).split("/")[0]
    files = {name.split("/")[1]: content for name, content in members.items()}
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    # every file written beside the run directory first: a write that fails (a full disk, a Ctrl-C) leaves the
    # copy an earlier piece left there as it was, instead of that copy deleted and this one half written; the
    # moves in hold the stop signals, so that a stop leaves one copy whole, not the two mixed; the staging folders a
    # killed join left (SIGKILL, which no finally outlives) go first
    tidy_staging(run_dir.parent, f".{run_dir.name}.joining-")
    # SIGTERM and SIGHUP, which would end the process on the spot, remove the staging folder first
    with signals_unwind(), new_staging(run_dir.parent, f".{run_dir.name}.joining-{os.getpid()}-") as staging:
        for name, content in files.items():
            (staging / name).write_bytes(content)
        with stop_signals_held():
            run_dir.mkdir(exist_ok=True)
            for path in run_files(run_dir):  # the earlier copy's files this one does not replace
                if path.name not in files:
                    path.unlink(missing_ok=True)
            for name in sorted(files, key=lambda name: name == CHECKPOINT):  # the checkpoint last
                os.replace(staging / name, run_dir / name)
            staging.rmdir()  # before a stop held meanwhile ends the process
    return run_dir


def _members(data: bytes, stem: str) -> dict[str, bytes]:
    """The files of one run directory in the tar ``data``, by member name; ValueError otherwise."""
    allowed = {path.name for path in run_files(".")}
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for info in tar.getmembers():
                folder, _, name = info.name.partition("/")
                if not (info.isfile() and RUN_NAME.match(folder) and folder not in (".", "..") and name in allowed):
                    raise ValueError(f"{stem}: member {info.name!r} is not a file of a run directory")
                file = tar.extractfile(info)
                assert file is not None  # a regular file
                members[info.name] = file.read()
    except tarfile.TarError as err:
        raise ValueError(f"{stem}: the joined parts are no tar archive ({err})") from None
    if len({name.split("/")[0] for name in members}) != 1:
        raise ValueError(f"{stem}: the archive must hold one run directory")
    return members
