"""Binaries the bench needs from the system: installed with apt-get when missing (and said so)."""

from __future__ import annotations

import shutil
import subprocess
import sys

__all__ = ["ensure_binary"]


def ensure_binary(name: str, package: str) -> str:
    """The path of ``name``; runs ``apt-get install -y <package>`` first if it is missing."""
    found = shutil.which(name)
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        raise RuntimeError(f"{name} is not installed and apt-get is not there to install it")
    print(f"bench: {name} is missing; running `apt-get install -y {package}`", file=sys.stderr)
    for command in ([apt, "install", "-y", "-q", package], [apt, "update", "-q"]):
        subprocess.run(command, check=False, capture_output=True)
        found = shutil.which(name)
        if found:
            return found
    subprocess.run([apt, "install", "-y", "-q", package], check=True, capture_output=True)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"apt-get install {package} did not provide {name}")
    return found
