"""Exports land whole or not at all: written into a staging folder beside their target, then moved into
place only when complete.

A Hugging Face export is a folder (``staged_folder``): it replaces an existing folder as a whole, so no
file of an earlier export survives beside the new ones; a folder holding files psattn did not write
(no ``.psattn-export`` manifest lists them) is replaced only when asked (``force``), and a target that
is a file is refused. ONNX graphs with their weights file, or an ExecuTorch program, are a set of files beside one another
(``staged_files``): the new set replaces the old one, and files of the old set the new one does not
have (an INT8 copy of an earlier export, say) are removed; a summary of the export (``--json``) may be
renamed into place with them. The moves into place run with the stop
signals held back, so Ctrl-C leaves the previous export or the new one, never a mix of the two; a
failure or a stop signal before them (a full disk, most often), or a refusal of the run, removes the
staging folder and the folders made to hold the target, and leaves the target as it was (SIGTERM and
SIGHUP then end the process as they would have, once that is done). A staging folder left
by a process that was killed is removed by the next export to the same target, and a folder set aside
by one killed while moving is put back.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NoReturn

from psattn.files import NEW_FILE_MODE, cannot_create, write_texts
from psattn.processes import folder_made, process_alive, remove_staging, signals_unwind
from psattn.training.signals import stop_signals_held

log = logging.getLogger(__name__)

MANIFEST = ".psattn-export"  # the files a folder export wrote, one JSON list


class ExportFailed(OSError):
    """Writing or reading back an export failed (a full disk, most often); nothing of it was left."""


def _leftovers(target: Path, kind: str) -> Iterator[Path]:
    """Folders ``.<target name>.<kind>-<pid>-*`` beside ``target`` whose process no longer runs."""
    prefix = f".{target.name}.{kind}-"
    for path in target.parent.glob(prefix + "*"):
        pid = path.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            yield path


def _tidy(target: Path) -> None:
    """Remove what killed exports to ``target`` left, and put back a folder one set aside."""
    for staging in _leftovers(target, "staging"):
        log.info("removing %s, left by an interrupted export", staging)
        shutil.rmtree(staging, ignore_errors=True)
    for old in _leftovers(target, "old"):
        if not target.exists():
            log.warning("putting back %s, set aside by an export that was killed while moving", target)
            (old / target.name).rename(target)
        shutil.rmtree(old, ignore_errors=True)


def _new_folder(target: Path, kind: str) -> Path:
    try:
        folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.{kind}-{os.getpid()}-", dir=target.parent))
    except OSError as err:  # named for the folder the caller gave, not the staging folder's hidden name
        raise cannot_create(target, err) from None
    folder.chmod(0o755)  # mkdtemp makes it private
    return folder


def _opened_up(folder: Path) -> None:
    """Give the files written in ``folder`` the permissions any new file gets (0644 under the usual umask
    022): some writers make theirs private (safetensors' model.safetensors is 0600)."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(NEW_FILE_MODE)


def _interrupted(err: BaseException) -> bool:
    """Whether ``err`` is, or was caused by, a Ctrl-C (exporters wrap it in their own errors)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__  # type: ignore[assignment]  # walks to None at the end
    return False


def _export_error(err: BaseException, target: Path, staging: Path, final: Path) -> BaseException:
    """``err`` as the error the export raises: Ctrl-C stays an interrupt; our own one-line errors pass;
    an exporter's or the disk's error becomes one ``ExportFailed`` line naming the target (a file named
    inside ``staging`` is named where it would have gone, in ``final``)."""
    if _interrupted(err):
        return KeyboardInterrupt()
    if not isinstance(err, Exception) or (isinstance(err, (ValueError, ImportError)) and not isinstance(err, OSError)):
        return err
    text = " ".join(str(err).split()).replace(str(staging), str(final))
    full = (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "Decode" in type(err).__name__ \
        or "no space" in text.lower() or "disk full" in text.lower()
    return ExportFailed(f"exporting to {target} failed ({type(err).__name__}: {text[:160] or 'no detail'}); "
                        "nothing of it was left there, and an earlier export at that path is intact"
                        + (". Is the disk full?" if full else ""))


def _foreign(folder: Path) -> list[str]:
    """The entries of ``folder`` that no psattn export wrote (its manifest does not list them)."""
    try:
        written = set(json.loads((folder / MANIFEST).read_text()))
    except (OSError, ValueError, TypeError):
        written = set()
    return sorted(p.name for p in folder.iterdir() if p.name != MANIFEST and p.name not in written)


def _reraise(err: BaseException, target: Path, staging: Path, final: Path, placed: bool = False) -> NoReturn:
    if placed and _interrupted(err):  # the stop came as the export moved in, and was held until it was in place
        raise KeyboardInterrupt(f"after the export was in place ({target} is whole)") from None
    converted = _export_error(err, target, staging, final)
    if converted is err:
        raise err
    raise converted from (None if isinstance(converted, KeyboardInterrupt) else err)


@contextlib.contextmanager
def staged_folder(target: str | Path, *, force: bool = False, what: str = "the export",
                  keep: Iterable[str | Path] = ()) -> Iterator[Path]:
    """Yield an empty staging folder beside ``target``; when the block completes, it becomes ``target``
    (an existing folder there is replaced as a whole). Refused before anything is written: a ``target``
    that is a file; one that is or holds the working directory or any of ``keep`` (even with ``force``);
    and (without ``force``) a folder holding files no psattn export wrote."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target} is a file; {what} is a folder: name a new folder, or one an earlier export wrote")
    whole = target.resolve()
    for inside in (Path.cwd(), *map(Path, keep)):
        if inside.resolve() == whole or whole in inside.resolve().parents:
            raise ValueError(f"{target} holds {inside}, and {what} replaces its folder as a whole: name a folder of its own")
    with signals_unwind(), folder_made(target.parent):
        _tidy(target)
        if target.is_dir() and not force:
            foreign = _foreign(target)
            if foreign:
                raise ValueError(f"{target} holds files psattn did not write ({', '.join(foreign[:3])}"
                                 f"{', ...' if len(foreign) > 3 else ''}); {what} replaces the folder as a whole: "
                                 "pass --force to replace it anyway, or name another folder")
        staging: Path | None = None
        old: Path | None = None
        placed = False
        try:
            with stop_signals_held():  # a Ctrl-C as the folder is made lands once it is in hand, for the cleanup
                staging = _new_folder(target, "staging")
            yield staging
            _opened_up(staging)
            names = sorted(p.name for p in staging.iterdir())
            (staging / MANIFEST).write_text(json.dumps(names))
            with stop_signals_held():  # the swap is not cut halfway, whichever thread a signal lands in
                if target.exists():
                    old = _new_folder(target, "old")
                    os.replace(target, old / target.name)
                os.replace(staging, target)
                placed = True  # a stop held meanwhile lands as this block ends: after the export
        except BaseException as err:
            if staging is None:  # the staging folder could not be made: the error names the target already
                raise
            _reraise(err, target, staging, target, placed)
        finally:
            if staging is not None:
                remove_staging(staging)  # a second stop meanwhile waits until it is gone
            if old is not None and placed:
                remove_staging(old)


@contextlib.contextmanager
def staged_files(target: str | Path, family: Callable[[Path], Iterable[Path]], *,
                 keep: Iterable[str | Path] = (), texts: dict[str | Path, str] | None = None) -> Iterator[Path]:
    """Yield ``target``'s path inside a staging folder beside it, where the export writes it and its
    companions; when the block completes, they are moved beside ``target``, and the files of
    ``family(target)`` (every name this kind of export may write) that it did not write are removed.
    ``texts``, which the block may fill (a summary of the export, anywhere), are written whole beside their
    paths first and renamed into place with the export, the stop signals held (``psattn.files.write_texts``).
    Refused before anything is written: a ``target`` that is a folder, and one whose family would replace
    or remove any of ``keep`` (a run's own files)."""
    target = Path(target)
    if target.is_dir():
        raise ValueError(f"{target} is a folder; name the file to write")
    kept = {Path(p).resolve() for p in keep}
    for path in (target, *family(target)):
        if path.resolve() in kept:
            raise ValueError(f"exporting to {target} would replace {path}, a file of the run itself: name another file")
    with signals_unwind(), folder_made(target.parent):
        _tidy(target)
        staging: Path | None = None
        placed = False
        try:
            with stop_signals_held():  # a Ctrl-C as the folder is made lands once it is in hand, for the cleanup
                staging = _new_folder(target, "staging")
            yield staging / target.name
            _opened_up(staging)
            written = sorted(p.name for p in staging.iterdir())

            @contextlib.contextmanager
            def swapped() -> Iterator[None]:  # not cut halfway, whichever thread a signal lands in
                nonlocal placed
                with stop_signals_held():
                    for name in written:
                        os.replace(staging / name, target.parent / name)
                    for stale in family(target):
                        if stale.name not in written:
                            stale.unlink(missing_ok=True)
                    yield  # the texts renamed into place
                    placed = True  # a stop held meanwhile lands as this block ends: after the export

            write_texts(texts or {}, replacing=swapped)
        except BaseException as err:
            if staging is None:  # the staging folder could not be made: the error names the target already
                raise
            _reraise(err, target, staging, target.parent, placed)
        finally:
            if staging is not None:
                remove_staging(staging)  # a second stop meanwhile waits until it is gone


def moved(paths: dict[str, str], target: Path) -> dict[str, str]:
    """Paths written in a staging folder, as they read once moved beside ``target``."""
    return {key: str(target.parent / Path(path).name) for key, path in paths.items()}
