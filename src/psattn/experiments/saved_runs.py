"""A finished run as one small JSON file, and back: what a GPU sweep hands back and ``docs/results/gpu`` keeps.

A run directory holds a checkpoint (about 1 GB for psa-92m with its optimiser state) and every
evaluation's per-head scores. Its summary (``summarise_run``) holds the config, the result, the
provenance (``meta.json``), for a text run the data it trained on (``data.json``) and the corpus's
size, and the history compacted: the per-head score lists (``HEAD_KEYS``) keep each layer's best head,
as a list of one score per layer (so ``phase_change.best_head`` reads either form alike), except at the
last evaluation, which keeps every head; the loss at every position (``position_loss``) is kept at the
last evaluation only. ``restore`` writes a summary back as a finished run directory (config, meta,
metrics, result), so that a sweep on a fresh machine skips the run. ``pack`` puts a piece's summaries
into one ``.tar.gz`` (a GPU machine hands back a few files per command), ``unpack`` takes them out.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path
from typing import IO, Any

from psattn.experiments.phase_change import best
from psattn.files import atomic_write, write_bytes, write_json, write_jsonl
from psattn.jsonfile import read_json
from psattn.training.config import canonical_config
from psattn.training.run_dir import load_result

FORMAT = 1
#: per-head score lists of an evaluation row: (layers, heads) nested lists
HEAD_KEYS = ("previous_token_score", "induction_score", "prefix_matching_score")
#: per-position lists kept at the last evaluation only
LAST_ONLY_KEYS = ("position_loss",)
SUMMARY_NAME = re.compile(r"^[A-Za-z0-9_.+-]+\.json$")


def compact_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` with every row but the last reduced as the module says."""
    rows = []
    for i, row in enumerate(history):
        if i == len(history) - 1:
            rows.append(dict(row))
            continue
        # the best score unrounded: rounded, 0.09996 became the phase-change threshold of 0.1, a phase change the
        # run's own history does not show
        rows.append({k: [[best(layer)] for layer in v] if k in HEAD_KEYS else v  # a NaN head: NaN, wherever it sits
                     for k, v in row.items() if k not in LAST_ONLY_KEYS})
    return rows


def corpus_record(task: dict[str, Any]) -> dict[str, Any] | None:
    """A text task's corpus as the run read it: the files its token streams hold (those left out, such as
    ``python-installed``'s non-UTF-8 files and the copies the split by file drops, not counted), their bytes
    of text (UTF-8, decompressed), the files' digest, and its tokens (train, held-out); None for another task."""
    if task.get("name") != "text":
        return None
    import numpy as np

    from psattn.tasks.text import TextConfig

    config = TextConfig(**{k: v for k, v in task.items() if k != "name"})
    tokens = config.tokens()
    meta = read_json(tokens.directory / "meta.json", what="token cache record")
    counts = sum(np.bincount(np.asarray(s), minlength=len(tokens.token_bytes)) for s in (tokens.train, tokens.eval))
    return {"corpus": config.corpus, "files": int(meta["documents"]), "bytes": int(counts @ tokens.token_bytes),
            "files_sha256": tokens.fingerprint["corpus_sha256"], "train_tokens": int(len(tokens.train)),
            "eval_tokens": int(len(tokens.eval))}


def device_name(device: str) -> str:
    """The accelerator's name (``torch.cuda.get_device_name``) for a CUDA run trained here, else ``device``."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device("cuda" if device == "auto" else device))
    return device


def summarise_run(run_dir: str | Path) -> dict[str, Any]:
    """The summary of the finished run in ``run_dir`` (ValueError if it has not finished)."""
    run_dir = Path(run_dir)
    result = load_result(run_dir)
    if result is None:
        raise ValueError(f"{run_dir} holds no finished run (no result.json)")
    config = result.pop("config")
    history = result.pop("history")
    data = run_dir / "data.json"
    return {"format": FORMAT, "name": config["name"], "config": config, "result": result,
            "history": compact_history(history), "meta": read_json(run_dir / "meta.json", what="run metadata"),
            "data": read_json(data, what="data record") if data.exists() else None,
            "corpus": corpus_record(config["task"]), "device": device_name(config["train"]["device"])}


def write_summary(run_dir: str | Path, out_dir: str | Path) -> Path:
    """``summarise_run`` written to ``out_dir/<run name>.json`` (returned)."""
    summary = summarise_run(run_dir)
    path = Path(out_dir) / f"{summary['name']}.json"
    write_json(path, summary)
    return path


def read_summary(path: str | Path) -> dict[str, Any]:
    """A saved run summary (JSON); ValueError when the file is not one."""
    summary = read_json(path, what="run summary", object_only=True)
    missing = {"format", "name", "config", "result", "history"} - summary.keys()
    if missing:
        raise ValueError(f"{path} is not a psattn run summary of format {FORMAT} (missing {sorted(missing)})")
    name = summary["name"]
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise ValueError(f"{path} names its run {name!r}, which is not a plain folder name: a summary restores into "
                         "<runs>/<name> and nowhere else")
    if summary["format"] != FORMAT:  # it said "(missing [])"
        raise ValueError(f"{path} is a run summary of format {summary['format']!r}, and this psattn reads format "
                         f"{FORMAT}: read it with the psattn that wrote it (the version in its \"meta\")")
    return summary


def load_summaries(directory: str | Path) -> dict[str, dict[str, Any]]:
    """Every summary in ``directory`` as ``load_result`` gives a finished run (its result with "config"
    and "history"; "corpus" too), keyed by run name; an absent directory gives none."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    results = {}
    for path in sorted(directory.glob("*.json")):
        s = read_summary(path)
        results[s["name"]] = {**s["result"], "history": s["history"], "config": canonical_config(s["config"]),
                              "meta": s.get("meta"), "corpus": s.get("corpus"), "device": s.get("device")}
    return results


def restore(summary_path: str | Path, runs_dir: str | Path) -> bool:
    """Write the summary at ``summary_path`` as a finished run directory under ``runs_dir`` unless that
    run directory already holds a result; returns whether it wrote one."""
    s = read_summary(summary_path)
    run_dir = Path(runs_dir) / s["name"]
    if load_result(run_dir) is not None:
        return False
    write_json(run_dir / "config.json", s["config"])
    write_json(run_dir / "meta.json", s.get("meta") or {})
    if s.get("data") is not None:
        write_json(run_dir / "data.json", s["data"])
    write_jsonl(run_dir / "metrics.jsonl", s["history"])
    write_json(run_dir / "result.json", s["result"])  # the history is metrics.jsonl's
    return True


def pack(paths: list[Path], archive: str | Path, folder: str) -> Path:
    """The summaries at ``paths`` as ``folder/<name>.json`` members of the gzipped tar ``archive``, written
    whole (``psattn.files``): a pack cut short leaves the archive already there as it was."""
    archive = Path(archive)

    def write(f: IO[bytes]) -> None:
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            for path in paths:
                data = Path(path).read_bytes()
                info = tarfile.TarInfo(f"{folder}/{Path(path).name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    atomic_write(archive, write)
    return archive


def unpack(archive: str | Path, out_dir: str | Path) -> list[Path]:
    """Write every summary of ``archive`` (made by ``pack``) to ``out_dir/<folder>/<name>.json``. A member
    that is not a plain ``folder/name.json`` file, or not a run summary, is refused before anything is
    written."""
    members = []
    with tarfile.open(archive, "r:gz") as tar:
        for info in tar.getmembers():
            parts = info.name.split("/")
            if not (info.isfile() and len(parts) == 2 and SUMMARY_NAME.match(parts[1])
                    and re.fullmatch(r"[A-Za-z0-9_-]+", parts[0])):
                raise ValueError(f"{archive}: member {info.name!r} is not a run summary folder/name.json")
            file = tar.extractfile(info)
            assert file is not None  # a regular file
            data = file.read()
            try:
                summary = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ValueError(f"{archive}: {info.name} is not JSON: {err}") from None
            if not isinstance(summary, dict) or summary.get("format") != FORMAT:
                raise ValueError(f"{archive}: {info.name} is not a run summary of format {FORMAT}")
            members.append((Path(out_dir) / parts[0] / parts[1], data))
    for path, data in members:  # each whole: a write that fails leaves the summary already there as it was
        write_bytes(path, data)
    return [path for path, _ in members]
