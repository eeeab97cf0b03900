"""One gateway call on a route charged by use: reserve, forward, settle exactly once.

The gateway (``x402srv.gateway.decide``) has already reserved the route's
``reserve`` (one atomic ``spend``); this settles it (one atomic ``refund`` of
the unused part, ``Meter.settle``) at the first of:

- the answer's headers, when the cost is in a header (``from = "header"``): the
  answer then carries the settled RateLimit fields and ``X-X402-Cost``;
- the end of the stream (``from = "sse"``, or ``from = "trailer"``: a
  trailer field of a chunked answer): the answer started with the
  reservation held (``X-X402-Reserved``, RateLimit after the reservation) and
  ends with what was charged: x402srv's ``x402-usage`` event (charged,
  reserved, balance) on an event stream, and the trailer fields
  ``X-X402-Cost`` and ``RateLimit`` on any chunked answer (announced in its
  ``Trailer`` header; an answer with a ``Content-Length`` cannot carry them);
- an upstream 5xx or failure: the whole reservation back if ``refund_on_5xx``,
  else what was reported (or ``on_missing``);
- the buyer leaving mid-answer: what the upstream reported so far, else the
  reservation; leaving before any byte of the call went out to the upstream
  (while the gateway waited for a connection to it): nothing.

A missing or invalid report is logged with the grant and route.
docs/selling-calls.md, "Charging by use", is the seller's and buyer's view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from x402srv.config.routes import RouteConfig, UsageCost
from x402srv.gateway.usage import SseUsage, charge, header_cost, usage_event
from x402srv.usage.credits import Meter, Usage

__all__ = ["COST_HEADER", "RESERVED_HEADER", "TRAILER_FIELDS", "Ending", "UsageCall"]

#: What the call was charged (credits), on answers whose cost is in a header.
COST_HEADER: Final = "X-X402-Cost"
#: What a streamed call holds while it runs; its charge comes in the final event.
RESERVED_HEADER: Final = "X-X402-Reserved"
#: What a chunked answer settled at its end carries in its trailer section.
TRAILER_FIELDS: Final = (COST_HEADER, "RateLimit")

log = logging.getLogger("x402srv.gateway")


@dataclass(frozen=True, slots=True)
class Ending:
    """What goes after the upstream's last chunk: a final event, the trailer fields."""

    tail: bytes = b""
    trailers: dict[str, str] = field(default_factory=dict)


class UsageCall:
    """The reservation of one call and its single settlement."""

    def __init__(self, meter: Meter, route: RouteConfig, usage: Usage, grant_id: str) -> None:
        assert route.usage is not None
        self.meter = meter
        self.route = route
        self.terms: UsageCost = route.usage
        self.usage = usage
        self.reserved = usage.cost
        self.grant_id = grant_id
        self.settled = False
        self.sse = SseUsage() if self.terms.source == "sse" else None
        #: What ``forward`` calls with each chunk: the SSE reader's own ``feed``, with no
        #: call in between (it runs for every chunk of a stream), or None: nothing to read.
        self.watch: Callable[[bytes], None] | None = self.sse.feed if self.sse is not None else None
        self._streams_events = False
        self._chunked = False
        #: Whether any byte of the call went out to the upstream (``sending``).
        self.sent = False

    def sending(self) -> None:
        """The call's first byte goes out to the upstream (``forward``'s ``sending``)."""
        self.sent = True

    async def _settle(
        self, reported: int | None, *, missing_costs: str, cut_short: str | None = None
    ) -> Usage:
        if self.settled:
            return self.usage
        self.settled = True
        used = charge(self.reserved, reported, on_missing=missing_costs)
        if cut_short is not None:  # (the buyer's doing: no report is missing from the upstream)
            log.info(
                "grant %s on %s: %s; charged %d of %d reserved (%s)",
                self.grant_id,
                self.route.prefix,
                cut_short,
                used,
                self.reserved,
                "nothing reported: the reservation" if reported is None else "what was reported",
            )
        elif reported is None:
            log.warning(
                "grant %s on %s: the upstream reported no valid cost; charged %d of %d reserved",
                self.grant_id,
                self.route.prefix,
                used,
                self.reserved,
            )
        elif reported > self.reserved:
            log.warning(
                "grant %s on %s: reported cost %d over the reservation; charged %d",
                self.grant_id,
                self.route.prefix,
                reported,
                self.reserved,
            )
        self.usage = await self.meter.settle(self.usage, used, route=self.route.prefix)
        # (debug: the store records every call, ``used_calls``; a log line each cost a
        # metered stream as much time as its settlement's store step)
        log.debug(
            "usage grant=%s route=%s reserved=%d charged=%d balance=%s",
            self.grant_id,
            self.route.prefix,
            self.reserved,
            self.usage.cost,
            self.usage.balance,
        )
        return self.usage

    def _reported(self) -> int | None:
        return self.sse.cost if self.sse is not None else None

    async def answered(self, status: int, headers: Mapping[str, str]) -> dict[str, str]:
        """The answer's extra headers, settling now when the cost is already known."""
        if status >= 500:
            return await self.failed(status, header_cost(headers.get(self.terms.header)))
        if not self.terms.at_end:
            usage = await self._settle(
                header_cost(headers.get(self.terms.header)), missing_costs=self.terms.on_missing
            )
            return {**usage.headers(), COST_HEADER: str(usage.cost)}
        content_type = headers.get("content-type", "")
        self._chunked = "content-length" not in headers
        self._streams_events = self.sse is not None and (
            content_type.split(";")[0].strip().lower() == "text/event-stream" and self._chunked
        )
        extra = {**self.usage.headers(), RESERVED_HEADER: str(self.reserved)}
        if self._chunked:
            extra["Trailer"] = ", ".join(TRAILER_FIELDS)
        return extra

    async def ended(self, trailers: Mapping[str, str]) -> Ending:
        """The answer is over: settle on its last report and tell the buyer (see the docstring).

        ``trailers`` are the upstream's trailer fields (``from = "trailer"``).
        """
        if not self.terms.at_end or self.settled:
            return Ending()
        if self.sse is not None:
            reported = self.sse.cost
        else:
            reported = header_cost(trailers.get(self.terms.header))
        usage = await self._settle(reported, missing_costs=self.terms.on_missing)
        fields = {COST_HEADER: str(usage.cost), **usage.headers()} if self._chunked else {}
        fields = {name: value for name, value in fields.items() if name in TRAILER_FIELDS}
        if not self._streams_events or self.sse is None:
            return Ending(trailers=fields)  # not an event stream: no event can be appended
        # An upstream that stopped inside an event: end it, so ours stays an event of its own.
        closing = b"\n\n" if self.sse.mid_event else b""
        event = usage_event(reserved=self.reserved, charged=usage.cost, balance=usage.balance)
        return Ending(closing + event, fields)

    async def failed(self, status: int, reported: int | None = None) -> dict[str, str]:
        """An upstream 5xx, failure or break: ``refund_on_5xx``, else settle on the report.

        A call none of whose bytes went out (the upstream could not be reached, or no
        connection to it was free in time) costs nothing either way: the upstream never
        saw it. A ``status`` under 500 is the buyer's own error found once the call was
        on its way (its body streamed past ``max_body_bytes``): the upstream has it, so
        it is charged as a buyer who left is, whatever ``refund_on_5xx`` says.
        """
        if self.settled:
            return self.usage.headers()
        if self.sent and status < 500:
            await self._settle(
                self._reported(),
                missing_costs="reserve",
                cut_short="the request body passed max_body_bytes after the call went out",
            )
        elif self.route.refund_on_5xx or not self.sent:
            why = f"upstream {status}" if self.sent else f"answered {status}, never sent upstream"
            await self._charge_nothing(why)
        else:
            if reported is None:
                reported = self._reported()
            await self._settle(reported, missing_costs=self.terms.on_missing)
        return {**self.usage.headers(), COST_HEADER: str(self.usage.cost)}

    async def abandoned(self) -> None:
        """The buyer left: what was reported so far, else the reservation.

        Nothing at all if it left before any byte of its call went out: the
        upstream never saw the call.
        """
        if self.sent or self.settled:
            await self._settle(
                self._reported(), missing_costs="reserve", cut_short="the buyer left mid-call"
            )
        else:
            await self._charge_nothing("the buyer left before the call was sent")

    async def _charge_nothing(self, why: str) -> None:
        """The whole reservation back: settled at 0, and logged with ``why``."""
        self.settled = True
        self.usage = await self.meter.settle(self.usage, 0, route=self.route.prefix)
        log.info(
            "usage grant=%s route=%s reserved=%d charged=0 (%s)",
            self.grant_id,
            self.route.prefix,
            self.reserved,
            why,
        )
