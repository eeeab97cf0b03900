"""``check_payment``: docs/protocol/flow.md step 5, one test per rule, with the x402 reason strings.

Payments are signed for real (``sign_transfer_authorization``) for a token
described by hand, so the rules run against genuine signatures without a chain.
The payment is checked against the server's own offer, never the client's.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from tests.support.configs import (
    BUYER,
    CUSTOM_ASSET,
    NOW,
    STRANGER,
    WALLET,
    custom_config,
    domain_for,
    offered_for,
    signed_payment,
    token_for,
)
from x402srv.config.models import Config
from x402srv.devchain import TokenInfo
from x402srv.errors import PaymentFailed
from x402srv.interfaces import Authorization
from x402srv.wire.eip712 import Eip3009Domain
from x402srv.wire.protocol import (
    check_payment,
    decode_payment_header,
    encode_header,
)
from x402srv.wire.reasons import Reason

CONFIG: Config = custom_config()
NETWORK = CONFIG.network_info
DOMAIN: Eip3009Domain = domain_for(NETWORK)
TOKEN: TokenInfo = token_for(NETWORK)
MAX_TIMEOUT = CONFIG.server.max_timeout_seconds


def test_reason_strings_are_the_x402_ones() -> None:
    assert Reason.INVALID_PAYMENT_REQUIREMENTS.value == "invalid_payment_requirements"
    assert Reason.UNSUPPORTED_SCHEME.value == "unsupported_scheme"
    assert Reason.INVALID_NETWORK.value == "invalid_network"
    assert Reason.RECIPIENT_MISMATCH.value == "invalid_exact_evm_payload_recipient_mismatch"
    assert Reason.VALUE_MISMATCH.value == "invalid_exact_evm_payload_authorization_value_mismatch"
    assert Reason.VALID_AFTER.value == "invalid_exact_evm_payload_authorization_valid_after"
    assert Reason.VALID_BEFORE.value == "invalid_exact_evm_payload_authorization_valid_before"
    assert Reason.INVALID_SIGNATURE.value == "invalid_exact_evm_payload_signature"


def offered() -> dict[str, Any]:
    return offered_for(CONFIG, "hourly")


def check(document: dict[str, Any], offer: dict[str, Any] | None = None) -> Authorization:
    """Through the real header codec, as the pipeline does."""
    payment = decode_payment_header(encode_header(document))
    return check_payment(payment, offer or offered(), NETWORK, DOMAIN, float(NOW))


def refused(document: dict[str, Any], reason: str, offer: dict[str, Any] | None = None) -> None:
    with pytest.raises(PaymentFailed) as caught:
        check(document, offer)
    error = caught.value
    assert error.reason == reason
    assert (error.status, error.code) == (402, "PAYMENT_FAILED")
    assert error.to_problem()["reason"] == reason


def accepted_with(**changes: Any) -> dict[str, Any]:
    """A correctly signed payment whose ``accepted`` differs from the offer."""
    document = signed_payment(offered(), TOKEN)
    document["accepted"].update(changes)
    return document


# ------------------------------------------------------------------ the good one


def test_valid_payment_is_accepted() -> None:
    auth = check(signed_payment(offered(), TOKEN, nonce=b"\xab" * 32))
    assert auth == Authorization(
        payer=BUYER.address,
        to=WALLET,
        value=100_000,
        valid_after=NOW - 60,
        valid_before=NOW + 120,
        nonce="0x" + "ab" * 32,
        signature=auth.signature,
    )
    assert auth.signature.startswith("0x")
    assert len(auth.signature) == 2 + 130


def test_other_plan_is_checked_against_its_own_amount() -> None:
    daily = offered_for(CONFIG, "daily")
    assert check(signed_payment(daily, TOKEN), daily).value == 1_500_000
    refused(signed_payment(offered(), TOKEN), Reason.INVALID_PAYMENT_REQUIREMENTS, daily)


def test_extra_is_not_compared() -> None:
    """``accepted`` must equal the offer in every field but ``extra`` (docs/protocol/wire.md)."""
    document = signed_payment(offered(), TOKEN)
    document["accepted"]["extra"] = {"planId": "something-else", "note": 1}
    check(document)
    del document["accepted"]["extra"]
    check(document)


def test_challenge_offer_with_ids_in_extra_is_accepted() -> None:
    offer = offered()
    offer["extra"].update(challengeId=str(uuid.uuid4()), requestId=str(uuid.uuid4()))
    check(signed_payment(offer, TOKEN), offer)


# ------------------------------------------------------- accepted vs. the offer


@pytest.mark.parametrize("scheme", ["upto", "EXACT", ""])
def test_scheme_other_than_exact(scheme: str) -> None:
    refused(accepted_with(scheme=scheme), Reason.UNSUPPORTED_SCHEME)


@pytest.mark.parametrize("network", ["eip155:84532", "eip155:1", "base", "EIP155:31337"])
def test_network_other_than_the_configured_one(network: str) -> None:
    refused(accepted_with(network=network), Reason.INVALID_NETWORK)


def test_asset_other_than_the_configured_token() -> None:
    refused(accepted_with(asset="0x" + "99" * 20), Reason.INVALID_PAYMENT_REQUIREMENTS)


@pytest.mark.parametrize(
    "changes",
    [
        {"amount": "99999"},
        {"amount": "100001"},
        {"amount": "0100000"},
        {"payTo": "0x" + "12" * 20},
        {"maxTimeoutSeconds": MAX_TIMEOUT + 1},
        {"maxTimeoutSeconds": 86_400},
    ],
)
def test_accepted_must_equal_the_offer(changes: dict[str, Any]) -> None:
    refused(accepted_with(**changes), Reason.INVALID_PAYMENT_REQUIREMENTS)


def test_offer_is_the_servers_not_the_clients() -> None:
    """A client that lowers the price in ``accepted`` and signs that is refused."""
    cheap = offered()
    cheap["amount"] = "1"
    refused(signed_payment(cheap, TOKEN), Reason.INVALID_PAYMENT_REQUIREMENTS)


# ----------------------------------------------------------- the authorization


def test_recipient_mismatch() -> None:
    refused(signed_payment(offered(), TOKEN, to=STRANGER.address), Reason.RECIPIENT_MISMATCH)


@pytest.mark.parametrize("value", [99_999, 100_001, 0, 10**30])
def test_value_mismatch(value: int) -> None:
    refused(signed_payment(offered(), TOKEN, value=value), Reason.VALUE_MISMATCH)


# ---------------------------------------------------------- validity window


@pytest.mark.parametrize("valid_after", [0, NOW - 1, NOW])
def test_valid_after_up_to_now_is_accepted(valid_after: int) -> None:
    check(signed_payment(offered(), TOKEN, valid_after=valid_after))


@pytest.mark.parametrize("valid_after", [NOW + 1, NOW + 3600, 2**255])
def test_valid_after_in_the_future_is_refused(valid_after: int) -> None:
    refused(signed_payment(offered(), TOKEN, valid_after=valid_after), Reason.VALID_AFTER)


@pytest.mark.parametrize(
    "valid_before", [NOW + 6, NOW + 7, NOW + MAX_TIMEOUT, NOW + MAX_TIMEOUT + 60]
)
def test_valid_before_inside_the_window_is_accepted(valid_before: int) -> None:
    check(signed_payment(offered(), TOKEN, valid_before=valid_before))


@pytest.mark.parametrize(
    "valid_before",
    [0, NOW - 1, NOW, NOW + 5, NOW + MAX_TIMEOUT + 61, NOW + 10**9, 2**256 - 1],
)
def test_valid_before_outside_the_window_is_refused(valid_before: int) -> None:
    refused(signed_payment(offered(), TOKEN, valid_before=valid_before), Reason.VALID_BEFORE)


def test_window_follows_the_offered_max_timeout() -> None:
    offer = offered()
    offer["maxTimeoutSeconds"] = 30
    check(signed_payment(offer, TOKEN, valid_before=NOW + 90), offer)
    refused(signed_payment(offer, TOKEN, valid_before=NOW + 91), Reason.VALID_BEFORE, offer)


def test_fractional_now_boundaries() -> None:
    payment = decode_payment_header(
        encode_header(signed_payment(offered(), TOKEN, valid_after=NOW, valid_before=NOW + 6))
    )
    with pytest.raises(PaymentFailed) as caught:
        check_payment(payment, offered(), NETWORK, DOMAIN, NOW + 0.5)
    assert caught.value.reason == Reason.VALID_BEFORE
    with pytest.raises(PaymentFailed) as caught:
        check_payment(payment, offered(), NETWORK, DOMAIN, NOW - 0.5)
    assert caught.value.reason == Reason.VALID_AFTER


# ------------------------------------------------------------------ signature


def test_signature_by_someone_else_is_refused() -> None:
    document = signed_payment(offered(), TOKEN, signer=STRANGER)
    document["payload"]["authorization"]["from"] = BUYER.address
    refused(document, Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize(
    "token",
    [
        TokenInfo(CUSTOM_ASSET, "USDC", "2", 6, 31337),
        TokenInfo(CUSTOM_ASSET, "USD Coin", "1", 6, 31337),
        TokenInfo(CUSTOM_ASSET, "USD Coin", "2", 6, 84532),
        TokenInfo("0x" + "77" * 20, "USD Coin", "2", 6, 31337),
    ],
)
def test_signature_for_another_domain_is_refused(token: TokenInfo) -> None:
    """The domain comes from config; a payment signed for another token/chain fails."""
    refused(signed_payment(offered(), token), Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize("field", ["validAfter", "validBefore", "nonce", "value", "to"])
def test_tampered_authorization_is_refused(field: str) -> None:
    """Change a signed field after signing, staying inside every other rule."""
    document = signed_payment(offered(), TOKEN)
    offer = offered()
    auth = document["payload"]["authorization"]
    if field == "validAfter":
        auth["validAfter"] = str(NOW - 61)
    elif field == "validBefore":
        auth["validBefore"] = str(NOW + 121)
    elif field == "nonce":
        auth["nonce"] = "0x" + "43" * 32
    else:
        # value and to must still match the offer: tamper with the offer and accepted instead
        offer = copy.deepcopy(offer)
        if field == "value":
            offer["amount"] = "100001"
            auth["value"] = "100001"
        else:
            offer["payTo"] = STRANGER.address
            auth["to"] = STRANGER.address
        document["accepted"] = copy.deepcopy(offer)
    refused(document, Reason.INVALID_SIGNATURE, offer)


def test_security_high_s_signature_is_refused() -> None:
    """The malleated twin of a valid signature would be refused on-chain; refuse it here."""
    document = signed_payment(offered(), TOKEN)
    check(document)
    raw = bytes.fromhex(document["payload"]["signature"][2:])
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    s = int.from_bytes(raw[32:64], "big")
    twin = raw[:32] + (n - s).to_bytes(32, "big") + bytes([55 - raw[64]])
    document["payload"]["signature"] = "0x" + twin.hex()
    refused(document, Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize("v", [0, 1])
def test_signature_with_v_0_or_1_is_refused(v: int) -> None:
    document = signed_payment(offered(), TOKEN)
    signature = document["payload"]["signature"]
    document["payload"]["signature"] = signature[:-2] + f"{v:02x}"
    refused(document, Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize("length", [64, 66, 1])
def test_signature_of_a_wrong_length_is_refused(length: int) -> None:
    document = signed_payment(offered(), TOKEN)
    raw = bytes.fromhex(document["payload"]["signature"][2:])
    document["payload"]["signature"] = "0x" + (raw * 2)[:length].hex()
    refused(document, Reason.INVALID_SIGNATURE)


def test_eip1271_style_long_signature_is_refused() -> None:
    document = signed_payment(offered(), TOKEN)
    document["payload"]["signature"] = "0x" + "ab" * 400
    refused(document, Reason.INVALID_SIGNATURE)


# ---------------------------------------------------------- case-insensitivity


def test_addresses_are_compared_case_insensitively() -> None:
    document = signed_payment(offered(), TOKEN)
    auth = document["payload"]["authorization"]
    auth["from"] = auth["from"].lower()
    auth["to"] = auth["to"].upper().replace("0X", "0x")
    document["accepted"]["payTo"] = WALLET.lower()
    document["accepted"]["asset"] = CUSTOM_ASSET.lower()
    result = check(document)
    assert result.payer == BUYER.address  # the recovered, checksummed signer
    assert result.to == auth["to"]


def test_offer_with_lowercase_addresses_accepts_checksummed_payments() -> None:
    offer = offered()
    offer["payTo"] = WALLET.lower()
    offer["asset"] = CUSTOM_ASSET.lower()
    check(signed_payment(offered(), TOKEN), offer)


def test_nonce_is_returned_lowercase() -> None:
    document = signed_payment(offered(), TOKEN, nonce=b"\xab" * 32)
    document["payload"]["authorization"]["nonce"] = "0x" + "AB" * 32
    assert check(document).nonce == "0x" + "ab" * 32
