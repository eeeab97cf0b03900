"""The hand-rolled EIP-712 digest and signer recovery (``x402srv.wire.eip712``).

The digest is checked against eth_account's generic ``encode_typed_data`` for
random inputs; recovery is checked against eth_account signatures and must
refuse what the token contract refuses (high-s, ``v`` not 27/28).
"""

from __future__ import annotations

from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import SignableMessage, encode_typed_data
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.configs import BUYER, CUSTOM_ASSET, WALLET
from x402srv.wire.eip712 import Eip3009Domain, TransferAuthorization, recover_signer

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
HALF_N = SECP256K1_N // 2

TYPES: dict[str, list[dict[str, str]]] = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}

UINT256 = st.integers(min_value=0, max_value=2**256 - 1)
ADDRESS = st.binary(min_size=20, max_size=20).map(lambda b: to_checksum_address(b))
TEXT = st.text(max_size=24)
PRIVATE_KEY = st.integers(min_value=1, max_value=SECP256K1_N - 1).map(
    lambda k: k.to_bytes(32, "big")
)
FAST = settings(max_examples=60, deadline=None, database=None)


def typed_data(domain: Eip3009Domain, transfer: TransferAuthorization) -> dict[str, Any]:
    return {
        "types": TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": domain.chain_id,
            "verifyingContract": domain.verifying_contract,
        },
        "message": {
            "from": transfer.payer,
            "to": transfer.to,
            "value": transfer.value,
            "validAfter": transfer.valid_after,
            "validBefore": transfer.valid_before,
            "nonce": transfer.nonce,
        },
    }


def eth_account_digest(signable: SignableMessage) -> bytes:
    """EIP-191 hashing of the SignableMessage: keccak(0x19 || version || header || body)."""
    return keccak(b"\x19" + signable.version + signable.header + signable.body)


DOMAIN = Eip3009Domain("USD Coin", "2", 31337, CUSTOM_ASSET)
TRANSFER = TransferAuthorization(
    payer=BUYER.address,
    to=WALLET,
    value=100_000,
    valid_after=0,
    valid_before=2**40,
    nonce=b"\x01" * 32,
)


@FAST
@given(
    name=TEXT,
    version=TEXT,
    chain_id=UINT256,
    contract=ADDRESS,
    payer=ADDRESS,
    to=ADDRESS,
    value=UINT256,
    valid_after=UINT256,
    valid_before=UINT256,
    nonce=st.binary(min_size=32, max_size=32),
)
def test_digest_matches_eth_account_encode_typed_data(
    name: str,
    version: str,
    chain_id: int,
    contract: str,
    payer: str,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes,
) -> None:
    domain = Eip3009Domain(name, version, chain_id, contract)
    transfer = TransferAuthorization(payer, to, value, valid_after, valid_before, nonce)
    signable = encode_typed_data(full_message=typed_data(domain, transfer))
    assert transfer.digest(domain) == eth_account_digest(signable)


def test_domain_separator_is_cached_and_lowercase_contract_gives_the_same_digest() -> None:
    assert DOMAIN.separator is DOMAIN.separator
    lower = Eip3009Domain("USD Coin", "2", 31337, CUSTOM_ASSET.lower())
    assert TRANSFER.digest(lower) == TRANSFER.digest(DOMAIN)


@pytest.mark.parametrize("field", ["value", "valid_after", "valid_before"])
@pytest.mark.parametrize("number", [-1, 2**256])
def test_digest_refuses_numbers_outside_uint256(field: str, number: int) -> None:
    values: dict[str, Any] = {
        "payer": BUYER.address,
        "to": WALLET,
        "value": 1,
        "valid_after": 0,
        "valid_before": 1,
        "nonce": b"\x00" * 32,
    }
    values[field] = number
    with pytest.raises(ValueError, match="uint256"):
        TransferAuthorization(**values).digest(DOMAIN)


@pytest.mark.parametrize(
    "changed",
    [
        Eip3009Domain("USDC", "2", 31337, CUSTOM_ASSET),
        Eip3009Domain("USD Coin", "1", 31337, CUSTOM_ASSET),
        Eip3009Domain("USD Coin", "2", 1, CUSTOM_ASSET),
        Eip3009Domain("USD Coin", "2", 31337, WALLET),
    ],
)
def test_every_domain_field_changes_the_digest(changed: Eip3009Domain) -> None:
    assert TRANSFER.digest(changed) != TRANSFER.digest(DOMAIN)


# ------------------------------------------------------------------ recovery


def sign(private_key: bytes, digest: bytes) -> bytes:
    return bytes(Account.from_key(private_key).unsafe_sign_hash(digest).signature)


@settings(max_examples=25, deadline=None, database=None)
@given(private_key=PRIVATE_KEY, nonce=st.binary(min_size=32, max_size=32))
def test_recover_signer_recovers_eth_account_signatures(private_key: bytes, nonce: bytes) -> None:
    account = Account.from_key(private_key)
    transfer = TransferAuthorization(account.address, WALLET, 1, 0, 10, nonce)
    signable = encode_typed_data(full_message=typed_data(DOMAIN, transfer))
    signature = bytes(account.sign_message(signable).signature)
    assert signature[64] in (27, 28)
    assert recover_signer(transfer.digest(DOMAIN), signature) == account.address


def split(signature: bytes) -> tuple[int, int, int]:
    return (
        int.from_bytes(signature[:32], "big"),
        int.from_bytes(signature[32:64], "big"),
        signature[64],
    )


def join(r: int, s: int, v: int) -> bytes:
    return r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([v])


def test_security_high_s_malleated_signature_is_refused() -> None:
    """The twin (r, n - s, v ^ 1) recovers the same key, but USDC's ECRecover refuses it."""
    digest = TRANSFER.digest(DOMAIN)
    signature = sign(bytes(BUYER.key), digest)
    r, s, v = split(signature)
    assert s <= HALF_N  # eth_account produces low-s
    twin = join(r, SECP256K1_N - s, 55 - v)
    assert recover_signer(digest, signature) == BUYER.address
    assert recover_signer(digest, twin) is None


@pytest.mark.parametrize("v", [0, 1, 26, 29, 35, 255])
def test_v_outside_27_28_is_refused(v: int) -> None:
    digest = TRANSFER.digest(DOMAIN)
    r, s, good_v = split(sign(bytes(BUYER.key), digest))
    assert recover_signer(digest, join(r, s, good_v)) == BUYER.address
    assert recover_signer(digest, join(r, s, v)) is None


@pytest.mark.parametrize("length", [0, 64, 66, 130])
def test_signature_of_a_wrong_length_is_refused(length: int) -> None:
    digest = TRANSFER.digest(DOMAIN)
    signature = sign(bytes(BUYER.key), digest)
    wrong = (signature * 3)[:length]
    assert recover_signer(digest, wrong) is None


@pytest.mark.parametrize(("r", "s"), [(0, 1), (1, 0), (0, 0), (SECP256K1_N, 1)])
def test_unrecoverable_signature_is_none_not_an_exception(r: int, s: int) -> None:
    assert recover_signer(TRANSFER.digest(DOMAIN), join(r, s, 27)) is None


def test_signature_over_another_digest_recovers_someone_else() -> None:
    signature = sign(bytes(BUYER.key), TRANSFER.digest(DOMAIN))
    other = TRANSFER.digest(Eip3009Domain("USD Coin", "2", 1, CUSTOM_ASSET))
    assert recover_signer(other, signature) not in (None, BUYER.address)
