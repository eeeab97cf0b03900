"""``[rate_limit]``: who counts as one client, refused unless said exactly.

``client_ip_header`` used to mean "the first entry of this header", which the
client writes itself behind any proxy that appends; it now takes
``trusted_hops`` with it, so a config written for the old reading stops at
load (and at ``x402srv check``) instead of silently counting another entry.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.configs import config_dict, make_config
from x402srv.config.models import parse_config
from x402srv.errors import ConfigError


def refused(rate_limit: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_dict(rate_limit=rate_limit), env={})
    return str(caught.value)


def test_by_default_the_peer_address_counts() -> None:
    config = make_config()
    assert config.rate_limit.client_ip_header is None
    assert config.rate_limit.trusted_hops is None
    assert config.describe()["resolved"]["rate_limit_client"] == "the peer address (IPv6: its /64)"


@pytest.mark.parametrize(
    ("hops", "shown"),
    [
        (1, "the right-most address of X-Forwarded-For"),
        (2, "the 2nd from the right address of X-Forwarded-For"),
        (5, "the 5th from the right address of X-Forwarded-For"),
    ],
)
def test_check_shows_which_entry_counts(hops: int, shown: str) -> None:
    config = make_config(rate_limit={"client_ip_header": "X-Forwarded-For", "trusted_hops": hops})
    assert config.rate_limit.trusted_hops == hops
    described = config.describe()
    assert described["rate_limit"]["trusted_hops"] == hops
    rule = described["resolved"]["rate_limit_client"]
    assert rule.startswith(shown), rule
    assert rule.endswith("the peer address when it has fewer entries")


def test_a_header_without_trusted_hops_is_refused_naming_the_key() -> None:
    message = refused({"client_ip_header": "X-Forwarded-For"})
    assert "rate_limit.trusted_hops: required with client_ip_header" in message


def test_trusted_hops_without_a_header_is_refused() -> None:
    message = refused({"trusted_hops": 1})
    assert "rate_limit.trusted_hops: only with client_ip_header" in message


@pytest.mark.parametrize("hops", ["1", 1.0, True, 0, -1, 17])
def test_trusted_hops_is_a_whole_number_from_1_to_16_never_coerced(hops: Any) -> None:
    message = refused({"client_ip_header": "X-Forwarded-For", "trusted_hops": hops})
    assert "rate_limit.trusted_hops:" in message


@pytest.mark.parametrize("header", ["X Forwarded For", "X-Forwarded-For:", "", "é"])
def test_the_header_must_be_a_header_name(header: str) -> None:
    message = refused({"client_ip_header": header, "trusted_hops": 1})
    assert "rate_limit.client_ip_header:" in message
    assert "trusted_hops" not in message  # one error, the one that says what is wrong
