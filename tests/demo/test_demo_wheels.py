"""``pip install "x402srv[demo]"`` from wheels runs ``x402srv demo`` as written (issue 30, item 2).

What a seller does without a checkout: the core and the gas-wallet plugin are
built as wheels (as a release would publish them), a fresh virtualenv installs
``x402srv[demo]`` from them (their own dependencies come from the package
index, as for any seller), and ``x402srv demo`` runs in an empty directory. The
directory stays empty (anvil is never installed into the cwd) and the demo's
own output proves the purchase. anvil is the checkout's (``X402SRV_ANVIL``,
the documented override): the test does not download it again.

Marked ``slow`` (a virtualenv and a pip install: about a minute on a warm pip
cache): it runs with the rest of the suite, among the first files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from x402srv.devchain import ANVIL_ENV_VAR, find_anvil

pytestmark = pytest.mark.slow

#: What building the core needs from the checkout (the console's htmx is built into
#: x402srv/admin/static/vendor by ./run and shipped in the wheel).
CORE_FILES = ("pyproject.toml", "README.md", "MANIFEST.in", "scripts", "x402srv")
_BUILD_LEFTOVERS = shutil.ignore_patterns(
    "__pycache__", "*.egg-info", "build", "node_modules", ".venv", "tests"
)


def run(*args: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


def build_wheels(tmp_path: Path) -> Path:
    """The core's and the gas wallet's wheels, built from copies (the checkout stays clean)."""
    sources, wheels = tmp_path / "src", tmp_path / "wheels"
    for name in CORE_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, sources / "core" / name, ignore=_BUILD_LEFTOVERS)
        else:
            (sources / "core").mkdir(parents=True, exist_ok=True)
            shutil.copy(source, sources / "core" / name)
    shutil.copytree(
        REPO / "plugins" / "x402srv-gaswallet", sources / "gaswallet", ignore=_BUILD_LEFTOVERS
    )
    run(
        sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--wheel-dir", wheels, sources / "core", sources / "gaswallet",
    )  # fmt: skip
    return wheels


def test_pip_install_x402srv_demo_from_wheels_runs_the_demo(tmp_path: Path) -> None:
    wheels = build_wheels(tmp_path)
    assert sorted(p.name.split("-")[0] for p in wheels.glob("*.whl")) == [
        "x402srv",
        "x402srv_gaswallet",
    ]
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(
        venv / "bin" / "python", "-m", "pip", "install", "--quiet",
        "--find-links", wheels, "x402srv[demo]",
    )  # fmt: skip
    version = run(venv / "bin" / "x402srv", "--version").stdout
    assert "x402srv-gaswallet 0.1.0: gas-wallet" in version

    home = tmp_path / "home"
    somewhere = home / "somewhere"
    somewhere.mkdir(parents=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))},
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        ANVIL_ENV_VAR: str(find_anvil(REPO)),
    }
    demo = subprocess.run(
        [venv / "bin" / "x402srv", "demo"],
        cwd=somewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "<- 200 AccessGrant" in demo.stdout
    assert "6. Balances (USDC)" in demo.stdout
    assert list(somewhere.iterdir()) == []  # no node_modules (nor anything else) left here
