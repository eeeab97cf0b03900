"""Running the ``x402srv`` command against a test seller's config, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.seller import Seller
from x402srv.testing import toml


def x402srv(seller: Seller, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m x402srv ARGS --config <seller.toml>`` in the seller's directory."""
    return subprocess.run(
        [sys.executable, "-m", "x402srv", *args, "--config", str(seller.server.config_path)],
        cwd=seller.server.directory,
        env={**os.environ, **seller.server.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def check(directory: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``python -m x402srv check`` on ``document``, written as ``directory/seller.toml``."""
    (directory / "seller.toml").write_text(toml.dumps(document))
    return subprocess.run(
        [sys.executable, "-m", "x402srv", "check", "--config", "seller.toml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
