"""Where the repository is, for tests that run its files or put it on a server's PYTHONPATH."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The docs' sample files (docs/samples/), each run or parsed by tests/docs/.
SAMPLES = REPO / "docs" / "samples"
