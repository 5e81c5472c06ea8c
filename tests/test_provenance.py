"""A run records the git revision of the psattn source it ran from, and no other repository's."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psattn


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _revision_seen_from(lib: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PSATTN_GIT_REVISION"}
    code = "from psattn.provenance import git_revision; print(git_revision())"
    return subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(lib)}, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_an_installed_copy_inside_another_projects_work_tree_records_no_revision(tmp_path):
    """As psattn installed from a wheel into a .venv inside one's own git project: that project's
    commit is not psattn's; once the copy is tracked there, the commit describes it and is recorded."""
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    _git(project, "init", "-q")
    _git(project, "commit", "-q", "--allow-empty", "-m", "an unrelated project")
    shutil.copytree(Path(psattn.__file__).parent, project / "lib" / "psattn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert _revision_seen_from(project / "lib") == "None"
    _git(project, "add", "lib")
    _git(project, "commit", "-q", "-m", "psattn vendored")
    assert _revision_seen_from(project / "lib") == _git(project, "rev-parse", "HEAD")
