"""Seller credential callbacks used by real server processes in the tests.

Referenced by dotted path (``tests.support.seller_callbacks:...``); the server's
PYTHONPATH includes the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path


def fail_first_time(request: dict[str, str]) -> dict[str, str]:
    """The seller's backend is down for the first call of each challenge, then recovers."""
    marker = Path(os.environ["X402SRV_TEST_CALLBACK_DIR"]) / request["challengeId"]
    if not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError("seller backend unavailable")
    return {"token": f"api-key-{request['challengeId']}", "tokenType": "ApiKey"}
