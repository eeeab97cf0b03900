"""``python -m x402srv`` is the ``x402srv`` command."""

import sys

from x402srv.cli.main import main

sys.exit(main())
