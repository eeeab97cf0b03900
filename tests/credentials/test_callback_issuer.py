"""The ``callback`` issuer with real seller functions from ``tests.support.issuer_callbacks``."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import issuer_callbacks
from tests.support.credentials import (
    FROZEN_NOW,
    TTL,
    FrozenClock,
    build_issuer,
    grant_request,
    make_config,
)
from x402srv.default_plugins.callback_issuer import CallbackIssuerError
from x402srv.errors import ConfigError, ProblemError
from x402srv.interfaces import CredentialIssuer

MODULE = "tests.support.issuer_callbacks"
EXPECTED_PAYLOAD = {
    "requestId": "6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11",
    "challengeId": "ch_7Yq2n4Kp",
    "planId": "hourly",
    "resourceId": "weather:berlin",
    "txHash": "0x" + "ab" * 32,
    "payer": "0x" + "22" * 20,
}


@pytest.fixture(autouse=True)
def _fresh_calls() -> Iterator[None]:
    issuer_callbacks.CALLS.clear()
    yield
    issuer_callbacks.CALLS.clear()


def issuer_for(function: str, clock: FrozenClock, **options: Any) -> Any:
    """``timeout_seconds`` maps to ``[credentials] callback_timeout_seconds``."""
    extra = {f"callback_{key}": value for key, value in options.items()}
    return build_issuer(
        "callback", make_config(issuer="callback", callback=function, **extra), clock
    )


def _never_shows_token(error: BaseException) -> None:
    shown = "".join(traceback.format_exception(error))
    assert issuer_callbacks.TOKEN not in shown
    assert issuer_callbacks.TOKEN not in repr(error)


async def test_sync_callback_gets_the_grant_fields_in_a_worker_thread(clock: FrozenClock) -> None:
    issuer = issuer_for(f"{MODULE}:issue_sync", clock)
    assert isinstance(issuer, CredentialIssuer)
    await issuer.start()
    credential = await issuer.issue(grant_request())
    await issuer.close()

    assert credential.token == issuer_callbacks.TOKEN
    assert credential.token_type == "Bearer"
    assert credential.expires_at == FROZEN_NOW + TTL
    [(payload, thread)] = issuer_callbacks.CALLS
    assert payload == EXPECTED_PAYLOAD
    assert thread != threading.get_ident()  # not on the event loop's thread
    assert issuer.jwks() is None


async def test_async_callback_is_awaited_on_the_loop(clock: FrozenClock) -> None:
    credential = await issuer_for(f"{MODULE}:issue_async", clock).issue(grant_request())
    assert credential.token == issuer_callbacks.TOKEN
    assert credential.expires_at == FROZEN_NOW + 7200  # "2026-01-01T02:00:00Z"
    [(payload, thread)] = issuer_callbacks.CALLS
    assert payload == EXPECTED_PAYLOAD
    assert thread == threading.get_ident()


async def test_object_with_async_call_and_custom_token_type(clock: FrozenClock) -> None:
    credential = await issuer_for(f"{MODULE}:issue_callable", clock).issue(grant_request())
    assert credential.token_type == "DPoP"
    assert credential.expires_at == FROZEN_NOW + TTL


async def test_unix_seconds_expiry(clock: FrozenClock) -> None:
    credential = await issuer_for(f"{MODULE}:issue_unix_expiry", clock).issue(grant_request())
    assert credential.expires_at == 1_767_229_200.0


@pytest.mark.parametrize(
    "spec", [f"{MODULE}.issue_sync", f"{MODULE}:issue_sync", f"{MODULE}:Nested.issue"]
)
async def test_dotted_path_forms(clock: FrozenClock, spec: str) -> None:
    assert (await issuer_for(spec, clock).issue(grant_request())).token == issuer_callbacks.TOKEN


@pytest.mark.parametrize(
    ("function", "raised"),
    [("raise_error", RuntimeError), ("raise_async", LookupError)],
)
async def test_raising_callback(clock: FrozenClock, function: str, raised: type) -> None:
    with pytest.raises(CallbackIssuerError, match=raised.__name__) as caught:
        await issuer_for(f"{MODULE}:{function}", clock).issue(grant_request())
    # not a ProblemError: the pipeline answers CredentialPending and keeps the record PAID
    assert not isinstance(caught.value, ProblemError)
    assert isinstance(caught.value.__cause__, raised)


async def test_callback_raising_timeout_error_is_not_reported_as_slow(clock: FrozenClock) -> None:
    with pytest.raises(CallbackIssuerError, match="raised TimeoutError"):
        await issuer_for(f"{MODULE}:raise_timeout_error", clock).issue(grant_request())


async def test_slow_async_callback_times_out(clock: FrozenClock) -> None:
    """A real (short) timeout: the deadline is wall-clock time, not the injected clock."""
    issuer = issuer_for(f"{MODULE}:slow_async", clock, timeout_seconds=0.05)
    with pytest.raises(CallbackIssuerError, match=r"did not answer within 0\.05 s"):
        await issuer.issue(grant_request())


async def test_slow_sync_callback_times_out(clock: FrozenClock) -> None:
    issuer = issuer_for(f"{MODULE}:slow_sync", clock, timeout_seconds=0.05)
    issuer_callbacks.RELEASE.clear()
    try:
        with pytest.raises(CallbackIssuerError, match="did not answer"):
            await issuer.issue(grant_request())
    finally:
        issuer_callbacks.RELEASE.set()  # let the abandoned worker thread finish


TOKEN = issuer_callbacks.TOKEN


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        pytest.param(None, "returned NoneType", id="none"),
        pytest.param(TOKEN, "returned str", id="bare-string"),
        pytest.param([TOKEN], "returned list", id="list"),
        pytest.param({}, "no usable 'token'", id="empty"),
        pytest.param({"token": ""}, "no usable 'token'", id="empty-token"),
        pytest.param({"token": 12345}, "no usable 'token'", id="int-token"),
        pytest.param({"token": f"{TOKEN} x"}, "no usable 'token'", id="token-with-space"),
        pytest.param({"token": f"{TOKEN}\n"}, "no usable 'token'", id="token-with-newline"),
        pytest.param({"token": TOKEN, "tokenType": 3}, "'tokenType'", id="int-type"),
        pytest.param({"token": TOKEN, "tokenType": ""}, "'tokenType'", id="empty-type"),
        pytest.param({"token": TOKEN, "expiresAt": "tomorrow"}, "RFC 3339", id="bad-date"),
        pytest.param({"token": TOKEN, "expiresAt": "2026-01-01"}, "RFC 3339", id="date-only"),
        pytest.param(
            {"token": TOKEN, "expiresAt": "2026-01-01T02:00:00"}, "RFC 3339", id="no-offset"
        ),
        pytest.param({"token": TOKEN, "expiresAt": True}, "'expiresAt'", id="bool-expiry"),
        pytest.param({"token": TOKEN, "expiresAt": [1]}, "'expiresAt'", id="list-expiry"),
        pytest.param({"token": TOKEN, "expiresAt": FROZEN_NOW}, "future", id="expires-now"),
        pytest.param(
            {"token": TOKEN, "expiresAt": "2025-12-31T23:00:00Z"}, "future", id="past-date"
        ),
        pytest.param({"token": TOKEN, "expiresAt": 10**20}, "future", id="year-10000"),
        pytest.param({"token": TOKEN, "expiresAt": float("nan")}, "future", id="nan"),
        pytest.param({"token": TOKEN, "expires_at": 1}, "unknown keys", id="snake-case-key"),
    ],
)
async def test_malformed_answer_is_refused_without_showing_the_token(
    clock: FrozenClock, monkeypatch: pytest.MonkeyPatch, answer: Any, complaint: str
) -> None:
    monkeypatch.setattr(issuer_callbacks, "ANSWER", answer)
    with pytest.raises(CallbackIssuerError, match=complaint) as caught:
        await issuer_for(f"{MODULE}:answer_as_set", clock).issue(grant_request())
    _never_shows_token(caught.value)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        pytest.param(None, "required", id="missing"),
        pytest.param("fetch", "dotted path", id="no-module"),
        pytest.param("mypkg:", "dotted path", id="no-function"),
        pytest.param("my pkg:fetch", "dotted path", id="not-identifiers"),
        pytest.param("tests.credentials.no_such_module:fetch", "cannot import", id="unimportable"),
        pytest.param(f"{MODULE}:no_such_function", "no attribute", id="no-attribute"),
        pytest.param(f"{MODULE}:not_callable", "not callable", id="not-callable"),
    ],
)
def test_unusable_callback_is_a_config_error(
    clock: FrozenClock, spec: str | None, complaint: str
) -> None:
    config = (
        make_config(issuer="callback", callback=spec) if spec else make_config(issuer="callback")
    )
    with pytest.raises(ConfigError, match=complaint) as caught:
        build_issuer("callback", config, clock)
    assert caught.value.path == "credentials.callback"


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"timeout_seconds": 0}, r"credentials\.callback_timeout_seconds"),
        ({"timeout": 5}, r"credentials\.callback_timeout: unknown key"),
    ],
)
def test_bad_options_are_config_errors(
    clock: FrozenClock, options: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        issuer_for(f"{MODULE}:issue_sync", clock, **options)


def test_default_timeout_is_ten_seconds(clock: FrozenClock) -> None:
    assert "timeout_seconds=10" in repr(issuer_for(f"{MODULE}:issue_sync", clock))
