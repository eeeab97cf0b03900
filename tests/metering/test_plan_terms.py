"""Plans that sell calls: their config (errors name the key path) and what buyers see before paying.

A plan carries ``calls`` (credits), ``token_ttl_seconds`` (time), or both, and
may carry a per-grant ``rate_limit``; a gateway route may set a ``cost``. The
discovery offer's ``plans[]``, every requirement's ``extra`` and the agent
card say what each plan includes, so an agent compares plans before it pays.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import config_dict, make_config
from x402srv.config.models import Config
from x402srv.config.plans import CALLS_TOKEN_TTL_SECONDS, parse_rate_limit
from x402srv.errors import ConfigError
from x402srv.interfaces import RateWindow
from x402srv.plugin import DelegatingStore
from x402srv.server.registry import Registry
from x402srv.testing.builders import make_record
from x402srv.wire.card import agent_card
from x402srv.wire.offers import OfferBuilder

LLM = {
    "plan_id": "llm-1k",
    "unit_amount": "$1",
    "description": "1,000 completions",
    "calls": 1000,
    "rate_limit": "10/s",
}
BURST = {
    "plan_id": "burst",
    "unit_amount": "$0.50",
    "description": "An hour, rate limited",
    "rate_limit": "600/min",
}


def _config(*plans: dict[str, Any], **sections: Any) -> Config:
    document = config_dict(**sections)
    document["plans"] += [dict(plan) for plan in plans]
    return make_config(document)


def _error(*plans: dict[str, Any], **sections: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        _config(*plans, **sections)
    return str(caught.value)


# ------------------------------------------------------------ config


def test_a_plan_sells_calls_time_or_both() -> None:
    config = _config(LLM, BURST, {**LLM, "plan_id": "both", "token_ttl_seconds": 3600})
    llm, burst, both = (config.plan_map[p] for p in ("llm-1k", "burst", "both"))
    assert (llm.calls, llm.rate, llm.token_ttl_seconds) == (
        1000,
        RateWindow(10, 1),
        CALLS_TOKEN_TTL_SECONDS,
    )
    assert (burst.calls, burst.rate, burst.token_ttl_seconds) == (None, RateWindow(600, 60), 3600)
    assert (both.calls, both.token_ttl_seconds) == (1000, 3600)
    assert [p.metered for p in config.plan_map.values()] == [False, False, True, True, True]
    assert config.meters_calls
    assert not make_config(config_dict()).meters_calls


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("10/s", RateWindow(10, 1)),
        ("600/min", RateWindow(600, 60)),
        (" 5000 / h ", RateWindow(5000, 3600)),
        ("20000/day", RateWindow(20000, 86400)),
        ("3/SECOND", RateWindow(3, 1)),
    ],
)
def test_rate_limits_read_as_calls_per_window(text: str, window: RateWindow) -> None:
    assert parse_rate_limit(text) == window


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ({**LLM, "calls": 0}, r"plans[2].calls: Input should be greater than 0"),
        ({**LLM, "calls": "many"}, r'plans[2].calls: expected an integer, got a string "many"'),
        (
            {**LLM, "rate_limit": "10/fortnight"},
            r"plans[2].rate_limit: '10/fortnight' is not a rate",
        ),
        ({**LLM, "rate_limit": "0/s"}, r"plans[2].rate_limit: '0/s' allows no call at all"),
        ({**LLM, "rate_limit": "ten/s"}, r"plans[2].rate_limit: 'ten/s' is not a rate"),
        ({**LLM, "credits": 5}, "plans[2].credits: unknown key"),
    ],
    ids=["zero-calls", "calls-not-a-number", "unit", "zero-rate", "rate-not-a-number", "typo"],
)
def test_bad_plan_terms_name_their_key_path(plan: dict[str, Any], expected: str) -> None:
    assert expected in _error(plan)


def _route(**route: Any) -> list[dict[str, Any]]:
    return [{"prefix": "/v1", "upstream": "http://127.0.0.1:9000", **route}]


def test_a_route_cost_needs_a_plan_that_sells_calls() -> None:
    message = _error(routes=_route(cost=3, plans=["hourly"]))
    assert "routes[0].cost: ignored, because none of the route's plans sells calls" in message
    message = _error(LLM, routes=_route(cost=1001, plans=["llm-1k"]))
    assert "routes[0].cost: a call costs 1001 credits but plan 'llm-1k' sells only 1000" in message
    assert "routes[0].cost: Input should be greater than or equal to 1" in _error(
        LLM, routes=_route(cost=0)
    )
    config = _config(LLM, routes=_route(cost=5, refund_on_5xx=False))
    assert (config.routes[0].cost, config.routes[0].refund_on_5xx) == (5, False)
    assert _config(LLM, routes=_route()).routes[0].refund_on_5xx is True


class _Forgetful(DelegatingStore):
    """A store plugin from before credits: no credit methods, not even delegated ones."""

    keeps_credits = False


def test_a_store_without_credits_cannot_serve_plans_that_sell_calls(tmp_path: Path) -> None:
    from x402srv import hookimpl

    class Plugin:
        @hookimpl
        def register_stores(self, register: Any) -> None:
            register("forgetful", lambda ctx: _Forgetful(ctx.build_store("sqlite", {})))

    registry = Registry(entry_points=False, extra_plugins=[Plugin()])
    store = {"backend": "forgetful", "path": str(tmp_path / "x.db")}
    registry.build_store(make_config(config_dict(store=store)))  # time plans: fine
    with pytest.raises(ConfigError, match="keeps no credits") as caught:
        registry.build_store(_config(BURST, store=store))
    assert caught.value.path == "store.backend"


# ------------------------------------------------------------ what buyers see


def test_discovery_and_every_requirement_say_what_a_plan_includes() -> None:
    config = _config(LLM, BURST)
    body = OfferBuilder(config).catalog.body
    plans = {plan["planId"]: plan for plan in body["plans"]}
    assert plans["hourly"]["periodSeconds"] == 3600
    assert "calls" not in plans["hourly"]
    assert {k: plans["llm-1k"][k] for k in ("periodSeconds", "calls", "rateLimit")} == {
        "periodSeconds": CALLS_TOKEN_TTL_SECONDS,
        "calls": 1000,
        "rateLimit": {"limit": 10, "windowSeconds": 1},
    }
    assert plans["burst"]["rateLimit"] == {"limit": 600, "windowSeconds": 60}
    extra = {a["extra"]["planId"]: a["extra"] for a in body["accepts"]}
    assert extra["llm-1k"] == {
        "name": "USDC",
        "version": "2",
        "planId": "llm-1k",
        "periodSeconds": CALLS_TOKEN_TTL_SECONDS,
        "calls": 1000,
        "rateLimit": {"limit": 10, "windowSeconds": 1},
    }
    header = json.loads(base64.b64decode(OfferBuilder(config).catalog.header))
    assert header["accepts"] == body["accepts"]


def test_a_challenge_says_what_its_plan_includes() -> None:
    config = _config(LLM)
    plan = config.plan_map["llm-1k"]
    record = make_record(plan_id="llm-1k", amount=str(plan.amount))
    offer = OfferBuilder(config).challenge(record, plan)
    [accepted] = offer.body["accepts"]
    assert accepted["extra"]["calls"] == 1000
    assert accepted["extra"]["rateLimit"] == {"limit": 10, "windowSeconds": 1}
    assert accepted["extra"]["challengeId"] == record.challenge_id
    assert json.loads(base64.b64decode(offer.header))["accepts"] == [accepted]


def test_the_card_describes_each_plan() -> None:
    card = agent_card(_config(LLM, BURST, {**LLM, "plan_id": "both", "token_ttl_seconds": 3600}))
    [request_access] = [s for s in card["skills"] if s["id"] == "request-access"]
    text = request_access["description"]
    assert "hourly ($0.10: 1 hour)" in text
    assert "daily ($1.50: 1 day)" in text
    assert "llm-1k ($1: 1000 calls within 7 days, at most 10 per second)" in text
    assert "burst ($0.50: 1 hour, at most 600 per minute)" in text
    assert "both ($1: 1000 calls within 1 hour, at most 10 per second)" in text
