"""Running the ``x402srv`` command against a test seller's config, as an operator would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.seller import Seller
from x402srv.testing import launcher, toml


def x402srv(seller: Seller, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m x402srv ARGS --config <seller.toml>`` in the seller's directory."""
    return launcher.run(
        [*args, "--config", str(seller.server.config_path)],
        cwd=seller.server.directory,
        env={**os.environ, **seller.server.env},
    )


def check(directory: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``python -m x402srv check`` on ``document``, written as ``directory/seller.toml``."""
    (directory / "seller.toml").write_text(toml.dumps(document))
    return launcher.run(["check", "--config", "seller.toml"], cwd=directory, env=os.environ)
