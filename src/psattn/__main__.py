"""``python -m psattn`` runs the command line (also under ``torchrun -m psattn``)."""

import sys

from .cli import main

sys.exit(main())
