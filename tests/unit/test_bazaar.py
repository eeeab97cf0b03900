"""The bazaar extension (docs/bazaar.md): what the official SDK's helpers declare, byte for byte.

Each case builds the extension twice, with x402srv from the config and with
the official Python SDK (``declare_discovery_extension``, then its resource
server extension adding the method as for a request), and compares them; the
SDK's facilitator-side validator then checks ``info`` against ``schema``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from x402.extensions.bazaar import (
    OutputConfig,
    bazaar_resource_server_extension,
    declare_discovery_extension,
    validate_discovery_extension,
)

from tests.support.configs import config_dict, make_config
from x402srv.config.discovery import DiscoveryConfig
from x402srv.errors import ConfigError
from x402srv.testing.builders import make_record
from x402srv.wire.bazaar import bazaar_extension
from x402srv.wire.offers import OfferBuilder

FORECAST_IN = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "hours": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}
FORECAST_OUT = {"properties": {"temperature": {"type": "number"}}, "required": ["temperature"]}

CASES: dict[str, dict[str, Any]] = {
    "json body": {
        "body_type": "json",
        "input": {"city": "Lisbon", "hours": 3},
        "input_schema": FORECAST_IN,
        "output": {"temperature": 21.5},
        "output_schema": FORECAST_OUT,
    },
    "query": {
        "input": {"city": "Lisbon"},
        "input_schema": FORECAST_IN,
        "output": {"temperature": 21.5},
    },
    "query, nothing but the method": {"method": "DELETE"},
    "text body on PUT": {"body_type": "text", "method": "PUT"},
}


def sdk_declaration(table: dict[str, Any]) -> dict[str, Any]:
    """The official helpers' output for the same call, enriched with its method."""
    output = None
    if "output" in table:
        output = OutputConfig(example=table["output"], schema=table.get("output_schema"))
    declared = declare_discovery_extension(
        input=table.get("input"),
        input_schema=table.get("input_schema"),
        body_type=table.get("body_type"),
        output=output,
    )
    method = table.get("method") or ("POST" if table.get("body_type") else "GET")
    context = SimpleNamespace(method=method)  # what the SDK reads from an HTTP request
    enriched = bazaar_resource_server_extension.enrich_declaration(declared["bazaar"], context)
    return {"bazaar": json.loads(json.dumps(enriched))}


@pytest.mark.parametrize("case", list(CASES))
def test_bazaar_extension_is_what_the_official_helpers_declare(case: str) -> None:
    ours = bazaar_extension(DiscoveryConfig.model_validate(CASES[case]))
    assert ours == sdk_declaration(CASES[case])
    checked = validate_discovery_extension(ours["bazaar"])
    assert checked.valid, checked.errors


def test_a_plans_challenge_carries_its_bazaar_extension_and_resource_metadata() -> None:
    document = config_dict()
    document["plans"][0]["discovery"] = {
        **CASES["json body"],
        "description": "Hourly forecasts for a city",
        "mime_type": "application/json",
    }
    config = make_config(document)
    plan = config.plan_map["hourly"]
    offer = OfferBuilder(config).challenge(
        make_record(plan_id="hourly", amount=str(plan.amount)), plan
    )
    required = json.loads(base64.b64decode(offer.header))
    assert required["extensions"]["bazaar"] == sdk_declaration(CASES["json body"])["bazaar"]
    assert required["resource"]["description"] == "Hourly forecasts for a city"
    assert json.loads(offer.content)["extensions"] == required["extensions"]
    daily = config.plan_map["daily"]
    other = OfferBuilder(config).challenge(
        make_record(plan_id="daily", amount=str(daily.amount)), daily
    )
    assert "bazaar" not in json.loads(base64.b64decode(other.header))["extensions"]


async def test_a_gateway_route_402_carries_the_routes_bazaar_extension(tmp_path: Path) -> None:
    from x402srv.server.app import create_app

    (tmp_path / "in.json").write_text(json.dumps(FORECAST_IN))
    discovery = {"input": {"city": "Lisbon"}, "input_schema": {"file": "in.json"}}
    document = config_dict(
        routes=[{"prefix": "/api", "upstream": "http://127.0.0.1:9", "discovery": discovery}],
        store={"backend": "memory"},
        reconciler={"enabled": False},
    )
    app = create_app(make_config(document, base_dir=tmp_path), name="bazaar_gateway")
    _, response = await app.asgi_client.get("/api/forecast")
    assert response.status_code == 402
    required = json.loads(base64.b64decode(response.headers["payment-required"]))
    expected = sdk_declaration({**discovery, "input_schema": FORECAST_IN})
    assert required["extensions"]["bazaar"] == expected["bazaar"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"method": "POST"}, "set body_type"),
        ({"method": "GET", "body_type": "json"}, "remove body_type"),
        ({"input_schema": {"file": "missing.json"}}, "cannot read schema file"),
        ({"input_schema": "not a schema"}, "JSON Schema object"),
        ({"mime_type": "json"}, "mime_type"),
    ],
)
def test_bad_discovery_metadata_is_a_config_error(
    tmp_path: Path, table: dict[str, Any], message: str
) -> None:
    document = config_dict()
    document["plans"][0]["discovery"] = table
    with pytest.raises(ConfigError, match=message):
        make_config(document, base_dir=tmp_path)
