"""``python -m x402srv`` is the ``x402srv`` command."""

import sys

from .cli import main

sys.exit(main())
