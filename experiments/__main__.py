"""``python -m experiments`` runs the ``gemmlab`` command line."""

import sys

from .cli import main

sys.exit(main())
