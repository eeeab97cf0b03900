"""The seller-side samples of the docs, run as written against tokens x402srv really issues.

Each sample reads ``seller.toml`` from its working directory, as a seller's app
would; the tests run them in ``docs/samples`` (where the quickstart's
``seller.toml`` is) with its secret in the environment.
"""

from __future__ import annotations

import runpy
import secrets
from typing import Any

import httpx
import pytest

from tests.support.paths import SAMPLES
from x402srv.config.models import load_config
from x402srv.interfaces import GrantRequest
from x402srv.server.registry import Registry

SECRET = "docs-sample-secret-" + "z" * 32
PAYER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


@pytest.fixture
def in_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SAMPLES)
    monkeypatch.setenv("X402SRV_JWT_SECRET", SECRET)


def run_sample(name: str) -> dict[str, Any]:
    """The sample's module globals after running it, as ``python docs/samples/<name>`` would."""
    return runpy.run_path(str(SAMPLES / name), run_name=name.removesuffix(".py"))


async def issued_token() -> str:
    """A token from the ``jwt`` issuer of the quickstart config: what a buyer gets."""
    issuer = Registry().build(load_config(SAMPLES / "seller.toml")).issuer
    await issuer.start()
    try:
        credential = await issuer.issue(
            GrantRequest(
                request_id=str(secrets.randbits(64)),
                challenge_id=str(secrets.randbits(64)),
                plan_id="hourly",
                resource_id="default",
                tx_hash="0x" + secrets.token_hex(32),
                payer=PAYER,
                token_ttl_seconds=3600,
            )
        )
    finally:
        await issuer.close()
    return credential.token


@pytest.mark.usefixtures("in_samples")
async def test_the_sanic_quickstart_guards_its_route_and_its_prefix() -> None:
    app = run_sample("weather_api.py")["app"]
    token = await issued_token()
    _, refused = await app.asgi_client.get("/weather")
    assert (refused.status, refused.json["code"]) == (401, "INVALID_TOKEN")
    _, opened = await app.asgi_client.get("/weather", headers={"Authorization": f"Bearer {token}"})
    assert opened.status == 200, opened.text
    assert (opened.json["plan"], opened.json["buyer"]) == ("hourly", PAYER)
    _, prefixed = await app.asgi_client.get("/api/anything")
    assert prefixed.status == 401


@pytest.mark.usefixtures("in_samples")
async def test_the_fastapi_sample_guards_api_and_serves_the_card() -> None:
    app = run_sample("fastapi_app.py")["app"]
    token = await issued_token()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller.test") as http:
        refused = await http.get("/api/weather")
        opened = await http.get("/api/weather", headers={"Authorization": f"Bearer {token}"})
        card = await http.get("/.well-known/agent-card.json")
    assert (refused.status_code, refused.json()["code"]) == (401, "INVALID_TOKEN")
    assert opened.json() == {"plan": "hourly", "buyer": PAYER}
    assert card.json()["name"] == "Weather Oracle"


@pytest.mark.usefixtures("in_samples")
async def test_the_any_code_sample_checks_tokens_both_ways() -> None:
    sample = run_sample("any_code.py")
    token = await issued_token()
    assert await sample["plan_of"]([f"Bearer {token}"]) == "hourly"
    assert sample["weather"]([f"Bearer {token}"]) == ({"plan": "hourly"}, 200, {})
    body, status, headers = sample["weather"]([f"Bearer {token}x"])
    assert (status, body["code"]) == (401, "INVALID_TOKEN")
    assert headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_the_jwks_sample_builds_its_verifier() -> None:
    verifier = run_sample("jwks_verifier.py")["verifier"]
    assert (verifier.issuer, verifier.audience, verifier.algorithm) == (
        "https://pay.example.com",
        "https://pay.example.com",
        "EdDSA",
    )


def test_the_revocation_sample_builds_its_verifier() -> None:
    from x402srv.tokens.revocation import RevocationList

    verifier = run_sample("revocation_verifier.py")["verifier"]
    assert isinstance(verifier.revocations, RevocationList)
    assert (
        verifier.revocations.url == "https://pay.example.com/.well-known/x402srv-revocations.json"
    )
