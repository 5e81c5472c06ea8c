"""``python -m psattn`` runs the command line (also under ``torchrun -m psattn``)."""

import sys

from psattn.cli import main

sys.exit(main())
