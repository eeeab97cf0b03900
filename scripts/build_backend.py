"""setuptools' build backend, with the console's third-party script copied in first.

``pyproject.toml`` names this module (``backend-path = ["scripts"]``). A wheel
or an sdist must ship ``x402srv/admin/static/vendor/htmx.min.js``, which is
not committed (it is htmx's code, from npm): when it is missing, this runs
``npm ci`` and ``npm run build:console`` before handing over to setuptools, so
the package carries it and a seller's install needs no Node. A wheel built
from the sdist finds it there. Editable installs (``./run``) read the source
tree, where ``./run`` builds it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook, as setuptools has it

ROOT = Path(__file__).resolve().parent.parent
VENDORED = ROOT / "x402srv" / "admin" / "static" / "vendor" / "htmx.min.js"


def _console_assets() -> None:
    if VENDORED.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"{VENDORED.relative_to(ROOT)} is missing and npm is not installed: building the "
            "package needs Node once (npm ci && npm run build:console)"
        )
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ROOT, check=True)
    subprocess.run([npm, "run", "--silent", "build:console"], cwd=ROOT, check=True)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _console_assets()
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    _console_assets()
    return str(_setuptools.build_sdist(sdist_directory, config_settings))
