"""The agent card (docs/protocol/wire.md): a2a-sdk reads it as 0.3 and as 1.0; our fields only."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3.types import AgentCard

from tests.support.configs import AGENT_URL, config_dict, custom_network_dict, make_config
from x402srv.config.models import Config
from x402srv.wire.card import X402_EXTENSION_URI, agent_card

SPEC_FIELDS = {
    "name",
    "description",
    "url",
    "preferredTransport",
    "additionalInterfaces",
    "supportedInterfaces",
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


def test_a2a_1_0_clients_find_a_1_0_interface_first(card: dict[str, Any]) -> None:
    """A2A 1.0 section 8.3: supportedInterfaces, the preferred first; 0.3 fields unchanged."""
    parsed = parse_agent_card(dict(card))
    interfaces = [
        (i.url, i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces
    ]
    access, a2a = f"{AGENT_URL}/pay/x402/access", f"{AGENT_URL}/pay/a2a"
    assert interfaces == [
        (access, "JSONRPC", "1.0"),
        (a2a, "JSONRPC", "1.0"),
        (access, "JSONRPC", "0.3"),
        (a2a, "JSONRPC", "0.3"),
    ]
    assert parsed.capabilities.streaming is True
    assert [e.uri for e in parsed.capabilities.extensions] == [X402_EXTENSION_URI]
    assert card["protocolVersion"] == "0.3.0"
    assert card["url"] == access


def test_a_0_3_reader_of_the_card_sees_0_3_interfaces() -> None:
    """A card without supportedInterfaces is what a 0.3 client reads: every URL at 0.3."""
    legacy = {k: v for k, v in agent_card(make_config()).items() if k != "supportedInterfaces"}
    parsed = parse_agent_card(legacy)
    assert {i.protocol_version for i in parsed.supported_interfaces} == {"0.3.0"}


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
    assert capabilities["streaming"] is True  # message/stream and tasks/resubscribe are served
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
    assert "Plans: hourly ($0.10: 1 hour); daily ($1.50: 1 day)." in request["description"]
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
