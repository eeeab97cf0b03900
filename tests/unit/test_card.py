"""The A2A 0.3.0 agent card (SPEC 4.1): a2a-sdk validates it, and it has exactly our fields."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.compat.v0_3.types import AgentCard

from tests.unit.support import AGENT_URL, config_dict, custom_network_dict, make_config
from x402srv.card import X402_EXTENSION_URI, agent_card
from x402srv.config import Config

SPEC_FIELDS = {
    "name",
    "description",
    "url",
    "preferredTransport",
    "additionalInterfaces",
    "version",
    "protocolVersion",
    "capabilities",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "provider",
}


@pytest.fixture(scope="module")
def config() -> Config:
    document = config_dict(server={"base_path": "/pay"})
    document["seller"]["agent_version"] = "2.3.4"
    return make_config(document)


@pytest.fixture(scope="module")
def card(config: Config) -> dict[str, Any]:
    return agent_card(config)


def test_card_validates_as_an_a2a_0_3_card(card: dict[str, Any]) -> None:
    parsed = AgentCard.model_validate(card)
    assert parsed.protocol_version == "0.3.0"
    assert parsed.url == f"{AGENT_URL}/pay/x402/access"
    assert [skill.id for skill in parsed.skills] == ["discover-products", "request-access"]
    assert parsed.capabilities.extensions is not None
    assert parsed.capabilities.extensions[0].uri == X402_EXTENSION_URI


def test_card_declares_both_json_rpc_urls(card: dict[str, Any]) -> None:
    """Issue 9: the card's url and <base_path><a2a_path> both speak A2A JSON-RPC."""
    parsed = AgentCard.model_validate(card)
    assert parsed.preferred_transport == "JSONRPC"
    assert parsed.additional_interfaces is not None
    assert [(i.url, i.transport) for i in parsed.additional_interfaces] == [
        (f"{AGENT_URL}/pay/x402/access", "JSONRPC"),
        (f"{AGENT_URL}/pay/a2a", "JSONRPC"),
    ]


def test_card_has_exactly_the_spec_fields(card: dict[str, Any]) -> None:
    assert set(card) == SPEC_FIELDS


def test_card_top_level_values(card: dict[str, Any]) -> None:
    assert card["name"] == "Weather Oracle"
    assert card["description"] == "Paid hourly weather data"
    assert card["url"] == f"{AGENT_URL}/pay/x402/access"
    assert card["version"] == "2.3.4"
    assert card["protocolVersion"] == "0.3.0"
    assert card["defaultInputModes"] == ["text"]
    assert card["defaultOutputModes"] == ["application/json"]
    assert card["provider"] == {"organization": "Example Inc", "url": "https://example.com"}


def test_capabilities_and_the_x402_extension(card: dict[str, Any]) -> None:
    capabilities = card["capabilities"]
    assert set(capabilities) == {
        "extensions",
        "pushNotifications",
        "streaming",
        "stateTransitionHistory",
    }
    assert capabilities["pushNotifications"] is False
    assert capabilities["streaming"] is False
    assert capabilities["stateTransitionHistory"] is False
    [extension] = capabilities["extensions"]
    assert set(extension) == {"uri", "description", "required"}
    assert extension["uri"] == (
        "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
    )
    assert extension["required"] is True
    assert "USDC" in extension["description"]
    assert "base-sepolia" in extension["description"]
    assert "eip155:84532" in extension["description"]


def test_skills(card: dict[str, Any]) -> None:
    discover, request = card["skills"]
    for skill in (discover, request):
        assert set(skill) == {"id", "name", "description", "tags", "examples"}
        assert all(isinstance(tag, str) and tag for tag in skill["tags"])
        assert skill["examples"]
        assert all(isinstance(example, str) for example in skill["examples"])
        assert card["url"] in skill["description"]
    assert (discover["id"], discover["name"]) == ("discover-products", "Discover products")
    assert (request["id"], request["name"]) == ("request-access", "Request access")
    assert "hourly, daily" in request["description"]
    assert any("hourly" in example for example in request["examples"])


def test_card_names_a_custom_network() -> None:
    card = agent_card(make_config(custom_network_dict()))
    AgentCard.model_validate(card)
    description = card["capabilities"]["extensions"][0]["description"]
    assert "USDC" in description
    assert "eip155:31337" in description


def test_card_without_base_path_and_default_version() -> None:
    card = agent_card(make_config())
    assert card["url"] == f"{AGENT_URL}/x402/access"
    assert card["version"] == "1.0.0"
