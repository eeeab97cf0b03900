"""``[[mcp]]``: what a tool costs, the default for unlisted tools, and the mistakes refused.

Every mistake is a ``ConfigError`` that names its key (docs/mcp.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.configs import make_config
from x402srv.errors import ConfigError

PLANS = [
    {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour"},
    {"plan_id": "calls", "unit_amount": "$1", "description": "100 calls", "calls": 100},
]
UPSTREAM = "http://127.0.0.1:9100/mcp"


def mcp(**table: Any) -> dict[str, Any]:
    return {"path": "/mcp", "upstream": UPSTREAM, **table}


def test_prices_and_the_unlisted_default_are_shown_by_check() -> None:
    config = make_config(
        plans=PLANS,
        mcp=[
            mcp(tools={"ping": {"free": True}, "search": {"cost": 2}, "report": {"price": "$0.05"}})
        ],
    )
    resolved = config.describe()["resolved"]["mcp"]["/mcp"]
    assert resolved == {
        "tools": {
            "ping": "free",
            "search": "2 credits of a plan",
            "report": "1 credit of a plan or $0.05 per call",
        },
        "unlisted_tools": "1 credit of a plan",
    }
    plan = config.plan_map["mcp.report"]  # the per-call plan the pipeline settles
    assert (plan.amount, plan.calls) == (50_000, 1)
    assert "mcp.report" not in config.seller_plan_ids  # it opens no [[routes]] by default


def test_a_tool_charged_by_use_reserves_and_says_so() -> None:
    cost = {"reserve": 40, "from": "meta", "on_missing": "nothing"}
    config = make_config(plans=PLANS, mcp=[mcp(tools={"llm": {"cost": cost}})])
    price = config.mcp[0].price_of("llm")
    assert price.credits == 40
    assert price.usage is not None and price.usage.on_missing == "nothing"
    shown = config.describe()["resolved"]["mcp"]["/mcp"]["tools"]["llm"]
    assert shown == "up to 40 credits of a plan, charged by use"


def test_an_unlisted_default_of_free_is_stated() -> None:
    config = make_config(plans=PLANS, mcp=[mcp(unlisted_tools={"free": True})])
    assert config.describe()["resolved"]["mcp"]["/mcp"]["unlisted_tools"] == "free"


@pytest.mark.parametrize(
    ("table", "plans", "key"),
    [
        (mcp(plans=["weekly"]), PLANS, "mcp[0].plans: no plan 'weekly'"),
        (
            mcp(tools={"report": {"price": "$0.0000001"}}),
            PLANS,
            "mcp[0].tools.report.price: $0.0000001 has more decimals than the token's 6",
        ),
        (
            mcp(tools={"search": {"cost": 2}}),
            PLANS[:1],
            "mcp[0].tools.search.cost: ignored, because none of the route's plans sells calls",
        ),
        (
            mcp(plans=["hourly"], unlisted_tools={"cost": 1}),
            PLANS,
            "mcp[0].unlisted_tools.cost: ignored, because none of the route's plans sells calls",
        ),
        (
            mcp(tools={"search": {"cost": 101}}),
            PLANS,
            "mcp[0].tools.search.cost: a call costs 101 credits but plan 'calls' sells only 100",
        ),
        (
            mcp(tools={"llm": {"cost": {"reserve": 500, "from": "meta"}}}),
            PLANS,
            "mcp[0].tools.llm.cost: a call costs 500 credits but plan 'calls' sells only 100",
        ),
        (mcp(tools={"llm": {"cost": {"reserve": 5, "from": "header"}}}), PLANS, "tools.llm.cost"),
        (mcp(tools={"llm": {"cost": {"reserve": 0}}}), PLANS, "mcp[0].tools.llm.cost"),
        (mcp(tools={"llm": {"cost": {"from": "meta"}}}), PLANS, "mcp[0].tools.llm.cost"),
        (mcp(tools={"ping": {"free": True, "cost": 1}}), PLANS, "mcp[0].tools.ping"),
        (mcp(tools={"ping": {"free": False}}), PLANS, "mcp[0].tools.ping.free"),
        (mcp(tools={"ping": {"price": "5 cents"}}), PLANS, "mcp[0].tools.ping.price"),
        (mcp(unlisted_tools={"price": "$0.01"}), PLANS, "mcp[0].unlisted_tools.price"),
        (mcp(tools={"bad name!": {"free": True}}), PLANS, "mcp[0].tools"),
        (mcp(path="/x402/access"), PLANS, "mcp[0].path: /x402/access overlaps the access"),
        (mcp(upstream="ftp://host/mcp"), PLANS, "mcp[0].upstream"),
        (mcp(colour="blue"), PLANS, "mcp[0].colour"),
        (
            mcp(tools={"hourly": {"price": "$1"}}),
            [*PLANS, {"plan_id": "mcp.hourly", "unit_amount": "$1", "description": "x"}],
            "mcp[0].tools.hourly.price: the tool's per-call plan 'mcp.hourly' already exists",
        ),
    ],
)
def test_a_mistake_is_a_config_error_naming_its_key(
    table: dict[str, Any], plans: list[dict[str, Any]], key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_config(plans=plans, mcp=[table])
    assert key in str(refused.value)


def test_mcp_needs_the_jwt_issuer() -> None:
    with pytest.raises(ConfigError, match="mcp: x402srv verifies the tokens"):
        make_config(
            plans=PLANS,
            mcp=[mcp()],
            credentials={"issuer": "callback", "callback": "x.y:z"},
        )
