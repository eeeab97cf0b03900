"""``GET /``: what a seller (or a buyer) sees on opening the server's URL.

A bare 404 there made a working server look broken. The index names the
seller and points at what the server does serve: the agent card, the access
endpoint, the A2A endpoint, each plan's price, and the console when it is
on this same listener (a console on a listener of its own is kept off a
public page: docs/console.md). JSON for programs, a small HTML page for a
browser (``Accept: text/html``). Nothing here is secret; everything is already
in the agent card. In gateway mode a ``[[routes]]`` prefix ``/`` owns the path
and this page is not installed.
"""

from __future__ import annotations

import html
import json
from typing import Any

from x402srv.config.models import Config

__all__ = ["index_document", "index_html", "wants_html"]


def index_document(config: Config) -> dict[str, Any]:
    seller = config.seller
    base = f"{seller.agent_url}{config.server.base_path}"
    document: dict[str, Any] = {
        "name": seller.agent_name,
        "description": seller.agent_description,
        "agentCard": f"{seller.agent_url}/.well-known/agent-card.json",
        "access": config.access_url,
        "a2a": f"{base}{config.server.a2a_path}",
        "plans": [
            {"planId": plan.plan_id, "price": plan.unit_amount, "description": plan.description}
            for plan in config.plans
        ],
    }
    admin = config.admin
    if admin is not None and admin.enabled and admin.port is None:
        document["console"] = f"{seller.agent_url}{admin.prefix}/"
    return document


def wants_html(accept: str | None) -> bool:
    """A browser's ``Accept`` puts ``text/html`` before any JSON type."""
    if not accept:
        return False
    kinds = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    if "text/html" not in kinds:
        return False
    json_at = [i for i, kind in enumerate(kinds) if kind.endswith("json")]
    return not json_at or kinds.index("text/html") < json_at[0]


def index_html(config: Config) -> str:
    document = index_document(config)
    e = html.escape

    def link(url: str) -> str:
        return f'<a href="{e(url)}">{e(url)}</a>'

    plans = "".join(
        f"<li><code>{e(p['planId'])}</code> {e(p['price'])}: {e(p['description'])}</li>"
        for p in document["plans"]
    )
    console = (
        f"<p>Seller's console: {link(document['console'])}</p>" if "console" in document else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(document['name'])}</title></head><body>"
        f"<h1>{e(document['name'])}</h1><p>{e(document['description'])}</p>"
        "<p>A payment-gated API (x402). Buyer agents start from the agent card: "
        f"{link(document['agentCard'])}</p>"
        f"<p>Access endpoint: <code>POST</code> {link(document['access'])}</p>"
        f"<h2>Plans</h2><ul>{plans}</ul>{console}"
        f"<pre>{e(json.dumps(document, indent=2))}</pre></body></html>"
    )
