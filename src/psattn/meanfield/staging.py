"""Files written as one set: into a staging folder inside their folder, moved into place only once all are
complete, so that a failure or a kill midway leaves the earlier set whole, not a mix of two (``psattn
meanfield run``, and ``meanfield_report`` under ``psattn meanfield reproduce`` and ``psattn reproduce``; the
latter's figures and theory files too). ``psattn.processes.tidy_staging`` removes the staging folders of
killed runs."""

from __future__ import annotations

#: the hidden folder a run writes its files into before they are moved into place (then its process id)
STAGING_PREFIX = ".meanfield-run-"
