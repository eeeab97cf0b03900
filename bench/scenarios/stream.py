"""Metered streams through the gateway: time to first byte and throughput, metered or not.

The upstream is the docs' streaming "LLM" (``docs/samples/llm_stream_upstream.py``,
uvicorn): ``POST /v1/complete`` answers a server-sent-events stream, one
``event: token`` per token and a last ``event: usage`` with the count. One
x402srv gateway (sqlite) has two routes to it:

- ``/metered``: a plan of credits, ``cost = { reserve = 2000, from = "sse" }``:
  the reservation spent before forwarding, the stream read as it passes, the
  unused part refunded at its end and one ``x402-usage`` event added;
- ``/fixed``: the same plan of credits at a fixed ``cost = FIXED`` a call (one
  spend before forwarding, as every call plan charged before issue 29);
- ``/unmetered``: a plan sold by time (a token check, nothing in the store).

A buyer buys both plans with the official client. Then, for each route with its
token:

- **time to first byte**: ``samples`` completions of ``TOKENS`` tokens, 2 ms
  apart (a stream the buyer sees arrive), one route then the other, per run:
  the median per run, judged on the median of the per-run ratios;
- **throughput**: wrk repeats one completion with no pause between tokens (the
  gateway's own work per stream), both routes in alternating runs (two pairs
  per run): complete streams per second, and tokens per second, judged on the
  median of the pairs' ratios.

Target (issue 29): metered at most 10% slower than unmetered, for both. The
fixed-cost route is measured beside them, so that a seller choosing how to
charge for calls sees what metering costs over a fixed price too.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from ..stack import Stack
from ..table import Row, Spread, ms, rate, times, verdict
from ..wrk import Load, run_wrk
from .guard import buy_token

__all__ = ["run"]

SECTION = "Metered streams through the gateway (SSE, sqlite, 1 worker)"
CREDITS = 1_000_000_000
RESERVE = 2000
FIXED = 100  # credits a call on the fixed-cost route
TOKENS = 64  # tokens per completion
DELAY = 0.002  # seconds between tokens of a timed completion
PLANS: list[dict[str, Any]] = [
    {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour, unmetered"},
    {"plan_id": "tokens", "unit_amount": "$1.00", "description": "Tokens", "calls": CREDITS},
]


def _routes(upstream: str) -> list[dict[str, Any]]:
    return [
        {
            "prefix": "/metered",
            "upstream": upstream,
            "plans": ["tokens"],
            "strip_prefix": True,
            "cost": {"reserve": RESERVE, "from": "sse"},
        },
        {
            "prefix": "/fixed",
            "upstream": upstream,
            "plans": ["tokens"],
            "strip_prefix": True,
            "cost": FIXED,
        },
        {"prefix": "/unmetered", "upstream": upstream, "plans": ["hourly"], "strip_prefix": True},
    ]


@dataclass
class Route:
    label: str
    url: str
    headers: dict[str, str]
    ttfb: list[float] = field(default_factory=list)  # median ms per run
    whole: list[float] = field(default_factory=list)  # median ms per run, the whole stream
    rate: list[float] = field(default_factory=list)  # complete streams per second per run
    errors: int = 0  # wrk's socket errors: a stream cut by its 2 s timeout on a loaded machine


async def _one(client: httpx.AsyncClient, route: Route) -> tuple[float, float]:
    """One streamed completion: ms to its first byte and to its end."""
    started = time.perf_counter()
    body = {"max_tokens": TOKENS, "delay": DELAY}
    async with client.stream("POST", route.url, json=body, headers=route.headers) as answer:
        chunks = answer.aiter_bytes()
        await anext(chunks)
        first = time.perf_counter()
        rest = b"".join([chunk async for chunk in chunks])
        if answer.status_code != 200 or b"event: usage" not in rest:
            raise RuntimeError(f"{route.url} answered {answer.status_code}: {rest[-200:]!r}")
    return (first - started) * 1000, (time.perf_counter() - started) * 1000


async def _timed(routes: list[Route], samples: int) -> None:
    """``samples`` completions per route, taking turns, on kept-alive connections."""
    seen: dict[str, list[tuple[float, float]]] = {route.url: [] for route in routes}
    async with httpx.AsyncClient(timeout=30) as client:
        for route in routes:  # warm-up: the connection, the token cache
            await _one(client, route)
        for _ in range(samples):
            for route in routes:
                seen[route.url].append(await _one(client, route))
    for route in routes:
        route.ttfb.append(statistics.median(t for t, _ in seen[route.url]))
        route.whole.append(statistics.median(w for _, w in seen[route.url]))


def _loaded(routes: list[Route], load: Load, runs: int) -> None:
    # Two rounds per run, each a third of the run's time per route, taking turns: the
    # machine's own drift (this 2-core machine's streams/s moves by 10-15% from one
    # run to the next, on either route) weighs less in the median of more pairs.
    share = replace(load, seconds=float(max(2, round(load.seconds / 3))))  # wrk: whole s
    body = json.dumps({"max_tokens": TOKENS})
    for round_ in range(2 * runs):
        for route in routes if round_ % 2 == 0 else list(reversed(routes)):
            result = run_wrk(route.url, share, method="POST", body=body, headers=route.headers)
            if not result.statuses_ok:
                raise RuntimeError(f"streams through {route.url}: {result.summary()}")
            route.rate.append(result.requests_per_second)  # (complete streams only)
            route.errors += result.errors


def run(stack: Stack, load: Load, samples: int, runs: int) -> list[Row]:
    upstream = stack.llm_upstream()
    server = stack.x402srv(
        stack.config(
            store="sqlite", settlement="gas-wallet", plans=PLANS, routes=_routes(upstream)
        ),
        "stream",
    )
    try:
        metered_token = buy_token(server.access_url, stack, plan_id="tokens")
        hourly_token = buy_token(server.access_url, stack, plan_id="hourly")
        json_ = {"Content-Type": "application/json"}
        metered = Route(
            f'metered route (reserve {RESERVE}, from = "sse")',
            f"{server.url}/metered/v1/complete",
            {**json_, "Authorization": f"Bearer {metered_token}"},
        )
        unmetered = Route(
            "unmetered route (time plan, token check only)",
            f"{server.url}/unmetered/v1/complete",
            {**json_, "Authorization": f"Bearer {hourly_token}"},
        )
        fixed = Route(
            f"fixed-cost route (same plan, cost = {FIXED})",
            f"{server.url}/fixed/v1/complete",
            {**json_, "Authorization": f"Bearer {metered_token}"},
        )
        direct = Route("the upstream directly (for reference)", f"{upstream}/v1/complete", json_)
        for round_ in range(runs):
            order = [unmetered, fixed, metered]
            order = order if round_ % 2 == 0 else list(reversed(order))
            asyncio.run(_timed([*order, direct], samples))
        _loaded([unmetered, fixed, metered], load, runs)
    finally:
        stack.stop_app(upstream)
        stack.stop_server(server)
    return _rows(metered, fixed, unmetered, direct, samples)


def _ratios(ours: list[float], theirs: list[float]) -> Spread:
    return Spread.of([o / t for o, t in zip(ours, theirs, strict=True)])


def _rows(metered: Route, fixed: Route, unmetered: Route, direct: Route, samples: int) -> list[Row]:
    ttfb = _ratios(metered.ttfb, unmetered.ttfb)
    speed = _ratios(metered.rate, unmetered.rate)
    over_fixed = (
        f"  (over the fixed-cost route: first byte {_ratios(metered.ttfb, fixed.ttfb).show(times)},"
        f" streams/s {_ratios(metered.rate, fixed.rate).show(times)})"
    )
    timed = f"{samples} x {len(metered.ttfb)} runs"

    def first_byte(route: Route) -> str:
        return (
            f"first byte p50 {Spread.of(route.ttfb).show(ms)} ms  whole stream "
            f"{Spread.of(route.whole).show(ms)} ms  ({TOKENS} tokens {DELAY * 1000:g} ms apart, "
            f"{timed})"
        )

    def throughput(route: Route) -> str:
        streams = Spread.of(route.rate)
        return (
            f"{streams.show(rate)} streams/s  "
            f"{Spread.of([r * TOKENS for r in route.rate]).show(rate)} tokens/s  "
            f"({TOKENS} tokens each, no pause)"
            + (f"  (socket errors {route.errors})" if route.errors else "")
        )

    return [
        Row(SECTION, f"time to first byte: {direct.label}", first_byte(direct)),
        Row(SECTION, f"time to first byte: {unmetered.label}", first_byte(unmetered)),
        Row(SECTION, f"time to first byte: {fixed.label}", first_byte(fixed)),
        Row(
            SECTION,
            f"time to first byte: {metered.label}",
            first_byte(metered),
            (
                verdict(
                    "first byte <= 1.1x unmetered (<= 10% slower)",
                    ttfb.median <= 1.1,
                    f"{ttfb.show(times)}",
                ),
            ),
        ),
        Row(SECTION, f"throughput: {unmetered.label}", throughput(unmetered)),
        Row(SECTION, f"throughput: {fixed.label}", throughput(fixed)),
        Row(
            SECTION,
            f"throughput: {metered.label}",
            throughput(metered) + over_fixed,
            (
                verdict(
                    ">= 0.9x the unmetered streams/s (<= 10% slower)",
                    speed.median >= 0.9,
                    f"{speed.show(times)}",
                ),
            ),
        ),
    ]
