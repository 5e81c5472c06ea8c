"""The ``psattn`` commands, one module per command family, each with ``register(subparsers)`` and its
handlers (``cmd_*``: parsed arguments -> exit code): ``reproduce``, ``train``, ``sweep``, ``demo``,
``generate``, ``plot``, ``evaluate`` (``psattn eval``), ``footprint``, ``configs``, ``export``, ``theory``
(``certify`` and ``theory ...``), ``meanfield`` and ``hf_demo``. ``psattn.cli`` builds the parser from
them. A handler imports what it runs inside itself, so building the parser stays cheap; the commands
live here, not in the packages they drive, so that those stay leaves (see docs/architecture.md)."""
