"""The console's figures from counters: periods, revenue sums, the funnel, settler calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from x402srv.config.models import Config, parse_config
from x402srv.errors import InvalidRequest
from x402srv.usage.counters import HOUR
from x402srv.usage.figures import DAY, MAX_POINTS, funnel, period, revenue, settler_figures, usd

USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"  # base-sepolia's
NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z
H0 = int(NOW // HOUR) * HOUR


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return parse_config(
        {
            "seller": {
                "agent_name": "Weather Oracle",
                "agent_description": "Paid hourly weather data",
                "agent_url": "https://api.example.com",
                "provider_name": "Example Inc",
                "provider_url": "https://example.com",
                "wallet_address": "0x" + "11" * 20,
                "network": "base-sepolia",
            },
            "plans": [{"plan_id": "hourly", "unit_amount": "$0.10", "description": "An hour"}],
            "credentials": {"secret": "s" * 32},
        },
        base_dir=tmp_path,
        env={},
    )


def test_the_default_period_is_the_last_week_by_day() -> None:
    window = period(NOW, None, None, None)
    assert window.bucket == "day"
    assert window.start == int((NOW - 7 * DAY) // DAY) * DAY
    assert window.end == (int(NOW // DAY) + 1) * DAY
    assert len(window.starts) == 8


def test_short_periods_are_by_hour_and_widened_to_whole_buckets() -> None:
    window = period(NOW, "2023-11-14T20:30:00Z", "2023-11-14T22:00:01Z", None)
    assert window.bucket == "hour"
    assert window.describe()["from"] == "2023-11-14T20:00:00Z"
    assert window.describe()["to"] == "2023-11-14T23:00:00Z"
    assert period(NOW, "2023-11-14", "2023-11-15", "hour").starts[0] == 1_699_920_000
    assert period(NOW, str(NOW - 3600), str(NOW), "hour").end == H0 + HOUR


@pytest.mark.parametrize(
    ("start", "end", "bucket"),
    [
        ("tomorrow", None, None),
        ("2023-11-15", "2023-11-14", None),
        (None, None, "week"),
        ("2000-01-01", None, "hour"),
    ],
)
def test_bad_periods(start: str | None, end: str | None, bucket: str | None) -> None:
    with pytest.raises(InvalidRequest):
        period(NOW, start, end, bucket)


def test_a_year_by_day_is_allowed() -> None:
    assert len(period(NOW, str(NOW - 365 * DAY), None, "day").starts) <= MAX_POINTS


@pytest.mark.parametrize(
    ("amount", "decimals", "dollars"),
    [
        (100_000, 6, "0.10"),
        (1_500_000, 6, "1.50"),
        (123_456, 6, "0.123456"),
        (0, 6, "0.00"),
        (10**24, 18, "1000000.00"),
        (1, 18, "0.000000000000000001"),
    ],
)
def test_usd_is_exact(amount: int, decimals: int, dollars: str) -> None:
    assert usd(amount, decimals) == dollars


def test_revenue_sums_count_times_price_per_bucket(config: Config) -> None:
    window = period(NOW, str(H0 - 2 * HOUR), str(H0 + 1), "hour")
    name = f"settled:hourly|eip155:84532|{USDC}|100000"
    repriced = f"settled:hourly|eip155:84532|{USDC}|200000"
    counts = {
        (H0 - 2 * HOUR, name): 3,
        (H0, name): 1,
        (H0, repriced): 2,
        (H0, "unpaid"): 500,
        (H0 - 10 * HOUR, name): 99,  # outside the window
        (H0, "settled:broken"): 7,  # not a name the counters make
    }
    page = revenue(counts, window, config)
    assert page["buckets"] == [
        "2023-11-14T20:00:00Z",
        "2023-11-14T21:00:00Z",
        "2023-11-14T22:00:00Z",
    ]
    (series,) = page["series"]
    assert series["counts"] == [3, 0, 3]
    assert series["amounts"] == ["300000", "0", "500000"]
    assert series["usd"] == ["0.30", "0.00", "0.50"]
    assert page["totals"] == [
        {
            "planId": "hourly",
            "network": "eip155:84532",
            "asset": USDC,
            "count": 6,
            "amount": "800000",
            "refunded": "0",
            "usd": "0.80",
        }
    ]
    assert page["totalUsd"] == "0.80"


def test_an_asset_the_config_no_longer_names_has_no_dollar_value(config: Config) -> None:
    window = period(NOW, None, None, "day")
    other = "0x" + "99" * 20
    page = revenue({(H0, f"settled:hourly|eip155:1|{other}|5"): 1}, window, config)
    assert page["totals"][0]["usd"] is None and page["totalUsd"] is None
    assert page["totals"][0]["amount"] == "5"


def test_the_funnel_and_its_failure_reasons() -> None:
    counts = {
        (H0, "unpaid"): 490,
        (H0, "limited"): 12,
        (H0, "challenge:hourly"): 20,
        (H0 + HOUR, "challenge:daily"): 5,
        (H0, "tried:hourly"): 9,
        (H0, "failed:invalid_exact_evm_payload_signature"): 3,
        (H0 + HOUR, "failed:invalid_exact_evm_payload_signature"): 1,
        (H0, "failed:already_redeemed"): 1,
        (H0, f"settled:hourly|eip155:84532|{USDC}|100000"): 5,
        (H0, "delivered:hourly"): 5,
        (H0, "settler:gas-wallet:settled"): 5,
        (H0, "revoked:hourly"): 2,
    }
    page = funnel(counts)
    assert page["stages"] == [
        {"stage": "unpaid", "count": 490},
        {"stage": "challenges", "count": 25},
        {"stage": "tried", "count": 9},
        {"stage": "settled", "count": 5},
        {"stage": "delivered", "count": 5},
    ]
    assert page["rateLimited"] == 12
    assert page["revoked"] == 2
    assert page["failures"] == [
        {"reason": "invalid_exact_evm_payload_signature", "count": 4},
        {"reason": "already_redeemed", "count": 1},
    ]
    assert page["byPlan"][1] == {
        "planId": "hourly",
        "challenges": 20,
        "tried": 9,
        "settled": 5,
        "delivered": 5,
    }


def test_settler_figures() -> None:
    counts = {
        (H0, "settler:facilitator:settled"): 8,
        (H0, "settler:facilitator:unknown"): 1,
        (H0, "settler:facilitator:rejected"): 1,
        (H0, "settler:facilitator:ms"): 1234,
        (H0 + HOUR, "settler:gas-wallet:settled"): 2,
        (H0 + HOUR, "settler:gas-wallet:ms"): 40,
    }
    assert settler_figures(counts) == [
        {
            "name": "facilitator",
            "calls": 10,
            "outcomes": {"rejected": 1, "settled": 8, "unknown": 1},
            "meanMs": 123.4,
        },
        {"name": "gas-wallet", "calls": 2, "outcomes": {"settled": 2}, "meanMs": 20.0},
    ]


async def test_a_metered_grant_shows_its_credits() -> None:
    """``usage`` of the grants list: the store's account of a plan that sells calls."""
    from x402srv.admin.views import usage_view
    from x402srv.default_plugins.memory_store import MemoryStore
    from x402srv.interfaces import UsedCall
    from x402srv.wire.offers import rfc3339

    store = MemoryStore()
    keep = NOW + 86_400
    await store.credit("grant-1", 100, key="grant-1", now=NOW, keep_until=keep)
    await store.credit("grant-1", 50, key="top-up-1", now=NOW + 10, keep_until=keep)
    for _ in range(3):
        await store.spend("grant-1", 2, now=NOW + 20, keep_until=keep)
    await store.refund("grant-1", 2, now=NOW + 30)
    await store.spend("grant-1", 4, now=NOW + 40, keep_until=keep)  # a call charged by use
    await store.settle("grant-1", 3, now=NOW + 41, call=UsedCall(NOW + 41, "/v1/complete", 4, 1))
    usage = usage_view(await store.get_credits("grant-1"), 100)
    assert usage is not None
    assert {k: v for k, v in usage.items() if k not in ("lastHours", "usedCalls")} == {
        "planCalls": 100,
        "balance": 145,
        "credited": 150,
        "spent": 10,
        "refunded": 5,
        "calls": 4,
        "topUps": 1,
    }
    assert usage["lastHours"][0]["hour"] == "2023-11-14T22:00:00Z"
    assert usage["usedCalls"] == [
        {"at": rfc3339(NOW + 41), "route": "/v1/complete", "reserved": 4, "charged": 1}
    ]
    assert usage_view(await store.get_credits("no-such-grant"), 100) is None


def test_the_revenue_chart_stacks_plans_and_scales_to_the_highest_bucket(
    config: Config,
) -> None:
    from x402srv.admin.chart import funnel_steps, revenue_chart

    window = period(NOW, str(H0 - 2 * HOUR), str(H0 + 1), "hour")
    hourly = f"settled:hourly|eip155:84532|{USDC}|100000"
    daily = f"settled:daily|eip155:84532|{USDC}|1500000"
    chart = revenue_chart(
        revenue({(H0, hourly): 5, (H0, daily): 1, (H0 - HOUR, hourly): 2}, window, config)
    )
    assert chart.unit == "USD" and chart.total == "$2.20" and not chart.empty
    tallest = max(bar.y + bar.height for bar in chart.bars) - min(bar.y for bar in chart.bars)
    assert round(tallest, 3) == round(chart.baseline - 12, 3)  # the $2.00 bucket fills the plot
    assert [text for _, text in chart.y_ticks] == ["$0.00", "$1.00", "$2.00"]
    titles = sorted(bar.title for bar in chart.bars)
    assert titles == [
        "11-14 21:00 hourly: $0.20 (2 sales)",
        "11-14 22:00 daily: $1.50 (1 sale)",
        "11-14 22:00 hourly: $0.50 (5 sales)",
    ]
    assert [anchor for *_, anchor in chart.x_labels] == ["start", "middle", "end"]
    empty = revenue_chart(revenue({}, window, config))
    assert empty.empty and empty.bars == [] and empty.total == "$0.00"
    steps = funnel_steps(
        {"stages": [{"stage": "unpaid", "count": 490}, {"stage": "settled", "count": 5}]}
    )
    assert [(s.count, s.conversion) for s in steps] == [(490, None), (5, "1%")]


def test_revenue_is_net_of_refunds_and_the_funnel_counts_them(config: Config) -> None:
    """Two sales, then 30000 and 100000 refunded (the second in the next hour): the
    amounts are what was kept, the refunds are shown beside them, the sales stay two."""
    window = period(NOW, str(H0), str(H0 + HOUR + 1), "hour")
    counts = {
        (H0, f"settled:hourly|eip155:84532|{USDC}|100000"): 2,
        (H0, f"refund:hourly|eip155:84532|{USDC}"): 30_000,
        (H0 + HOUR, f"refund:hourly|eip155:84532|{USDC}"): 100_000,
        (H0, "refunded:operator"): 1,
        (H0 + HOUR, "refunded:auto"): 1,
        (H0, "refund:broken"): 5,  # not a name the counters make
    }
    page = revenue(counts, window, config)
    (series,) = page["series"]
    assert series["counts"] == [2, 0]
    assert series["amounts"] == ["170000", "-100000"]
    assert series["refunded"] == ["30000", "100000"]
    (total,) = page["totals"]
    assert (total["count"], total["amount"], total["refunded"], total["usd"]) == (
        2,
        "70000",
        "130000",
        "0.07",
    )
    assert page["totalUsd"] == "0.07"
    assert funnel(counts)["refunded"] == 2
