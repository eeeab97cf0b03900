"""docs/local-chain.md, run as written: every command of "Run your own seller on a local chain".

The page's files (``docs/samples/local-chain/``: the shell lines, the seller's TOML, the
buyer script) are copied into a temp directory with the page's ports (8545, 8402) swapped
for free ones, and the lines run with ``bash -e``: anvil and the token, funding another
buyer, ``x402srv check`` and serve, a purchase with the official x402 client, the operator's
listing, and the stop. The whole session is killed by its id afterwards, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.paths import SAMPLES
from x402srv.devchain import ANVIL_ENV_VAR, find_anvil
from x402srv.testing.servers import free_port


def test_the_local_chain_page_runs_as_written(tmp_path: Path) -> None:
    chain_port, seller_port = free_port(), free_port()
    for sample in (SAMPLES / "local-chain").iterdir():
        text = sample.read_text().replace("8545", str(chain_port))
        (tmp_path / sample.name).write_text(text.replace("8402", str(seller_port)))
    bin_dir = Path(sys.executable).parent  # python and x402srv of this environment
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        ANVIL_ENV_VAR: str(find_anvil()),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    assert shutil.which("curl"), "the page's lines use curl"
    process = subprocess.Popen(
        ["bash", "-e", "run.sh"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # (anything the lines left behind)
    assert process.returncode == 0, out + (tmp_path / "seller.log").read_text(errors="replace")
    assert "buyer       0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC  key 0x5de4" in out
    assert "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65 now holds 5.00 USDC" in out
    assert "grant: hourly 0x" in out
    assert "DELIVERED  hourly        0.10 USDC ($0.10)" in out
