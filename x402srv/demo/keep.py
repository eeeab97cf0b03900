"""``x402srv demo --keep``: what to try against the stack left running, and how to stop it.

The commands are complete and copy-pasteable (real URLs, ports and paths of this
run). The token is fetched again with the demo's requestId rather than printed:
replaying a requestId is exactly what a buyer that lost its grant does.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from x402srv.demo.stack import ApiProcess, DemoStack
from x402srv.devchain import Devchain
from x402srv.testing.servers import ServerProcess

__all__ = ["instructions"]


def _x402srv_command() -> str:
    """The ``x402srv`` script of this environment, else ``python -m x402srv``."""
    script = Path(sys.executable).with_name("x402srv")
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m x402srv"


def instructions(
    stack: DemoStack,
    chain: Devchain,
    server: ServerProcess,
    api: ApiProcess,
    request_id: str,
    pids: list[tuple[str, int]],
) -> str:
    access = server.access_url
    grant_body = shlex.quote(f'{{"planId": "hourly", "requestId": "{request_id}"}}')
    python = shlex.quote(sys.executable)
    config = shlex.quote(str(stack.config_path))
    directory = shlex.quote(str(stack.directory))
    running = ", ".join(f"{name} pid {pid}" for name, pid in pids)
    kill = " ".join(str(pid) for _, pid in pids)
    json_header = "-H 'content-type: application/json'"
    return f"""
The stack keeps running (--keep): {running}.

  # what a buyer agent finds first: the A2A agent card
  curl -s {server.url}/.well-known/agent-card.json
  # discovery: every plan, as an x402 402 (header PAYMENT-REQUIRED = base64 of the body)
  curl -si -X POST {access} {json_header} -d '{{}}'
  # a challenge for one plan
  curl -s -X POST {access} {json_header} -d '{{"planId": "daily"}}'
  # the demo's grant again (its requestId; no payment), then the protected route
  TOKEN=$(curl -s -X POST {access} {json_header} -d {grant_body} \\
          | {python} -c 'import json,sys; print(json.load(sys.stdin)["accessToken"])')
  curl -s {api.url}/weather -H "Authorization: Bearer $TOKEN"
  # the operator's view of the same purchase
  {_x402srv_command()} challenges list --config {config}

  Pay from your own code (docs/buyers.md): chain {chain.network} at {chain.rpc_url},
  token {chain.token.address}; the buyer is anvil dev account #2
  ({stack.accounts.buyer.address}; its key is in anvil's well-known list).

Stop it:
  kill {kill} && rm -rf {directory}
"""
