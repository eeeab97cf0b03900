"""The console's refunds (docs/refunds.md): the purchase page's panel, and a two-step button.

``POST /purchases/<id>/refund`` without ``confirm=yes`` sends nothing: it
answers a confirmation page with what the purchase paid, what is already
refunded, what is left, and the amount about to go back; its button posts
the same fields with ``confirm=yes``, which asks for the refund and sends it
(``admin.refunds.ask_refund``, the admin API's own path), then returns to the
purchase's page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sanic import Request
from sanic.response import HTTPResponse, redirect

from x402srv.admin.refunds import ask_refund, purchase_refunds
from x402srv.errors import InvalidRequest
from x402srv.refunds.running import sender_of

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline
    from x402srv.admin.auth import Admin

__all__ = ["install_refund_pages", "refunds_panel"]


async def refunds_panel(pipeline: AccessPipeline, challenge_id: str) -> dict[str, Any] | None:
    """What the purchase page shows of its refunds; None when refunds are not set up."""
    if sender_of(pipeline) is None:
        return None
    return await purchase_refunds(pipeline, challenge_id)


def _body(form: Mapping[str, Any]) -> dict[str, Any]:
    amount = str(form.get("amount") or "").strip()
    return {
        "reason": str(form.get("reason") or ""),
        "amount": amount or None,
        "keepGrant": form.get("keepGrant") == "yes",
    }


def install_refund_pages(
    page: Callable[..., Any],
    render: Callable[..., HTTPResponse],
    url: Callable[..., str],
    pipeline: AccessPipeline,
    csrf: Callable[[Admin], str],
) -> None:
    async def refund(request: Request[Any, Any], admin: Admin, challenge_id: str) -> HTTPResponse:
        form: Mapping[str, Any] = request.form or {}
        body = _body(form)
        if form.get("confirm") != "yes":
            money = await purchase_refunds(pipeline, challenge_id)
            amount = body["amount"] or money["left"]
            if not str(amount).isdigit() or int(amount) <= 0 or not body["reason"].strip():
                raise InvalidRequest("a refund needs a positive amount and a reason")
            return render(
                "refund_confirm.html",
                here="purchases",
                csrf=csrf(admin),
                m=money,
                amount=amount,
                body=body,
            )
        await ask_refund(pipeline, challenge_id, body, f"console:{admin.name}")
        return redirect(url(f"/purchases/{challenge_id}"), status=303)

    page("/purchases/<challenge_id:str>/refund", ("POST",), mutating=True)(refund)
