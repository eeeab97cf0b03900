"""``./run serve``, the README's first command, as a newcomer runs it: it serves the agent card.

It runs in this checkout, as written, on a free port (``--port`` goes to
``x402srv``). ``./run test`` has installed everything before pytest starts, so
``./run`` skips pip, and the server is up in a second or two. ``./run serve``
ends in ``exec x402srv``, so the process started here is the server itself: it
is stopped by its PID (SIGTERM, and its whole session if it will not go).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.support.paths import REPO
from x402srv.testing.servers import free_port, wait_for_http


def test_run_serve_serves_the_agent_card(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "run-serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(REPO / "run"), "serve", "--port", str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        card_url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
        try:
            wait_for_http(card_url, timeout=120, process=server)
        except Exception as exc:
            raise AssertionError(log.read_text(errors="replace")[-4000:]) from exc
        card = httpx.get(card_url).json()
        assert card["name"] == "Weather Oracle"  # config.example.toml's seller
        assert {skill["id"] for skill in card["skills"]} >= {"discover-products", "request-access"}
        assert (REPO / ".x402srv-dev-secret").stat().st_size > 0  # made on first use, reused
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
