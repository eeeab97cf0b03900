"""EIP3009Token on a real anvil: it must behave like USDC wherever x402 depends on it.

Authorizations come from both our signer (`sign_transfer_authorization`) and the official
x402 SDK client, and are submitted through both signature encodings; revert strings are
compared exactly because facilitators map them to x402 error codes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from eth_abi.abi import decode
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak
from x402 import PaymentRequirements
from x402.mechanisms.evm import EthAccountSigner
from x402.mechanisms.evm.exact import ExactEvmClientScheme

from x402srv.devchain import (
    Devchain,
    Receipt,
    RpcError,
    TokenInfo,
    TransactionFailedError,
    encode_call,
    sign_cancel_authorization,
    sign_receive_authorization,
    sign_transfer_authorization,
)

_AUTH_PARAMS = "address,address,uint256,uint256,uint256,bytes32"
TRANSFER_VRS = f"transferWithAuthorization({_AUTH_PARAMS},uint8,bytes32,bytes32)"
TRANSFER_BYTES = f"transferWithAuthorization({_AUTH_PARAMS},bytes)"
RECEIVE_VRS = f"receiveWithAuthorization({_AUTH_PARAMS},uint8,bytes32,bytes32)"
RECEIVE_BYTES = f"receiveWithAuthorization({_AUTH_PARAMS},bytes)"
CANCEL_VRS = "cancelAuthorization(address,bytes32,uint8,bytes32,bytes32)"
CANCEL_BYTES = "cancelAuthorization(address,bytes32,bytes)"

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
USED_TOPIC = "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex()
CANCELED_TOPIC = "0x" + keccak(text="AuthorizationCanceled(address,bytes32)").hex()
# Far enough from "now" that chain-time drift between tests never matters.
HOUR = 3600

Authorization = dict[str, str]


# --------------------------------------------------------------------------- helpers


def split(signature: str) -> tuple[int, bytes, bytes]:
    raw = bytes.fromhex(signature.removeprefix("0x"))
    return raw[64], raw[:32], raw[32:64]


def pack(v: int, r: bytes, s: bytes) -> str:
    return "0x" + (r + s + bytes([v])).hex()


def auth_args(auth: Authorization) -> tuple[Any, ...]:
    return (
        auth["from"],
        auth["to"],
        int(auth["value"]),
        int(auth["validAfter"]),
        int(auth["validBefore"]),
        bytes.fromhex(auth["nonce"].removeprefix("0x")),
    )


def submit(
    chain: Devchain, sender: LocalAccount, signature: str, *args: Any, gas: int | None = None
) -> Receipt:
    data = encode_call(signature, *args)
    return chain.rpc.send_transaction(sender, to=chain.token.address, data=data, gas=gas)


def with_signature(
    function: str, base_args: tuple[Any, ...], signature: str
) -> tuple[str, tuple[Any, ...]]:
    """Arguments for the v,r,s or the bytes overload of `function`."""
    if function.endswith("bytes32,bytes32)"):
        return function, (*base_args, *split(signature))
    return function, (*base_args, bytes.fromhex(signature.removeprefix("0x")))


def transfer(
    chain: Devchain,
    sender: LocalAccount,
    auth: Authorization,
    signature: str,
    overload: str = TRANSFER_BYTES,
    gas: int | None = None,
) -> Receipt:
    function, args = with_signature(overload, auth_args(auth), signature)
    return submit(chain, sender, function, *args, gas=gas)


def expect_revert(reason: str, action: Callable[[], object]) -> None:
    with pytest.raises(RpcError) as info:
        action()
    assert info.value.revert_reason == reason, info.value


def read(chain: Devchain, signature: str, types: list[str], *args: Any) -> Any:
    return decode(types, chain.rpc.eth_call(chain.token.address, encode_call(signature, *args)))


def topic(address: str) -> str:
    return "0x" + address.lower().removeprefix("0x").rjust(64, "0")


def sdk_authorization(
    chain: Devchain, payer: LocalAccount, pay_to: str, amount: int
) -> tuple[str, Authorization]:
    """What the official x402 buyer signs for an `exact` EVM payment requirement."""
    requirements = PaymentRequirements(
        scheme="exact",
        network=chain.network,
        asset=chain.token.address,
        amount=str(amount),
        pay_to=pay_to,
        max_timeout_seconds=HOUR,
        extra=chain.token.eip712_extra,
    )
    inner = ExactEvmClientScheme(EthAccountSigner(payer)).create_payment_payload(requirements)
    return inner["signature"], inner["authorization"]


def devchain_authorization(
    chain: Devchain, payer: LocalAccount, pay_to: str, amount: int
) -> tuple[str, Authorization]:
    return sign_transfer_authorization(
        payer, chain.token, pay_to, amount, 0, chain.block_timestamp() + HOUR
    )


@pytest.fixture
def payer(devchain: Devchain) -> LocalAccount:
    return devchain.new_account()


@pytest.fixture
def payee(devchain: Devchain) -> LocalAccount:
    return devchain.new_account(usdc_atomic=0)


@pytest.fixture
def relayer(devchain: Devchain) -> LocalAccount:
    """Submits transactions for others, like an x402 facilitator."""
    return devchain.new_account(usdc_atomic=0)


# --------------------------------------------------------------------------- metadata


def test_metadata_and_eip712_domain(devchain: Devchain) -> None:
    token = devchain.token
    assert read(devchain, "name()", ["string"]) == ("USD Coin",)
    assert read(devchain, "symbol()", ["string"]) == ("USDC",)
    assert read(devchain, "version()", ["string"]) == ("2",)
    assert read(devchain, "decimals()", ["uint8"]) == (6,)
    assert read(devchain, "owner()", ["address"])[0].lower() == devchain.deployer.address.lower()

    signable = encode_typed_data(
        full_message={
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"},
                    {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"},
                ],
                "Empty": [],
            },
            "primaryType": "Empty",
            "domain": {
                "name": token.name,
                "version": token.version,
                "chainId": token.chain_id,
                "verifyingContract": token.address,
            },
            "message": {},
        }
    )
    assert read(devchain, "DOMAIN_SEPARATOR()", ["bytes32"]) == (signable.header,)

    fields, name, version, chain_id, contract, salt, extensions = read(
        devchain,
        "eip712Domain()",
        ["bytes1", "string", "string", "uint256", "address", "bytes32", "uint256[]"],
    )
    assert (fields, name, version, chain_id) == (b"\x0f", "USD Coin", "2", 31337)
    assert (contract.lower(), salt, extensions) == (token.address.lower(), b"\0" * 32, ())


def test_typehashes_equal_usdc(devchain: Devchain) -> None:
    usdc = {  # from circlefin/stablecoin-evm contracts/v2/EIP3009.sol
        "TRANSFER_WITH_AUTHORIZATION_TYPEHASH": "0x7c7c6cdb67a18743f49ec6fa9b35f50d"
        "52ed05cbed4cc592e13b44501c1a2267",
        "RECEIVE_WITH_AUTHORIZATION_TYPEHASH": "0xd099cc98ef71107a616c4f0f941f04c3"
        "22d8e254fe26b3c6668db87aae413de8",
        "CANCEL_AUTHORIZATION_TYPEHASH": "0x158b0a9edf7a828aad02f63cd515c68e"
        "f2f50ba807396f6d12842833a1597429",
    }
    for constant, expected in usdc.items():
        assert read(devchain, f"{constant}()", ["bytes32"]) == (bytes.fromhex(expected[2:]),)


def test_signer_matches_official_sdk(devchain: Devchain, payer: LocalAccount) -> None:
    """Same inputs -> same typed data -> same (deterministic) signature and wire dict."""
    to = devchain.new_account(eth=0, usdc_atomic=0).address
    sdk_signature, sdk_auth = sdk_authorization(devchain, payer, to, 1_500)
    signature, auth = sign_transfer_authorization(
        payer,
        devchain.token,
        to,
        1_500,
        int(sdk_auth["validAfter"]),
        int(sdk_auth["validBefore"]),
        sdk_auth["nonce"],
    )
    assert (signature, auth) == (sdk_signature, sdk_auth)


# --------------------------------------------------------------- transferWithAuthorization


@pytest.mark.parametrize("overload", [TRANSFER_VRS, TRANSFER_BYTES], ids=["vrs", "bytes"])
@pytest.mark.parametrize(
    "make_authorization", [devchain_authorization, sdk_authorization], ids=["devchain", "x402-sdk"]
)
def test_transfer_with_authorization(
    devchain: Devchain,
    payer: LocalAccount,
    payee: LocalAccount,
    relayer: LocalAccount,
    overload: str,
    make_authorization: Callable[..., tuple[str, Authorization]],
) -> None:
    signature, auth = make_authorization(devchain, payer, payee.address, 2_500_000)

    receipt = transfer(devchain, relayer, auth, signature, overload)

    assert devchain.balance_of(payee.address) == 2_500_000
    assert devchain.balance_of(payer.address) == 100_000_000 - 2_500_000
    assert devchain.authorization_state(payer.address, auth["nonce"])
    events = {log["topics"][0]: log for log in receipt.logs}
    assert events[USED_TOPIC]["topics"][1:] == [topic(payer.address), auth["nonce"]]
    assert events[TRANSFER_TOPIC]["topics"][1:] == [topic(payer.address), topic(payee.address)]
    assert [log.tx_hash for log in devchain.transfer_logs(to=payee.address)] == [receipt.tx_hash]


def test_replay_is_rejected(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    signature, auth = devchain_authorization(devchain, payer, payee.address, 1)
    transfer(devchain, relayer, auth, signature)
    for overload in (TRANSFER_BYTES, TRANSFER_VRS):
        with pytest.raises(RpcError) as info:
            transfer(devchain, relayer, auth, signature, overload)
        assert info.value.revert_reason == "FiatTokenV2: authorization is used or canceled"


def test_wrong_signer_or_tampered_fields_are_rejected(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    mallory = devchain.new_account()
    signature, auth = devchain_authorization(devchain, mallory, payee.address, 5)
    forged = {**auth, "from": payer.address}
    expect_revert(
        "FiatTokenV2: invalid signature", lambda: transfer(devchain, relayer, forged, signature)
    )

    signature, auth = devchain_authorization(devchain, payer, payee.address, 5)
    inflated = {**auth, "value": "6"}
    expect_revert(
        "FiatTokenV2: invalid signature", lambda: transfer(devchain, relayer, inflated, signature)
    )
    redirected = {**auth, "to": mallory.address}
    expect_revert(
        "FiatTokenV2: invalid signature", lambda: transfer(devchain, relayer, redirected, signature)
    )
    assert devchain.balance_of(payer.address) == 100_000_000


def test_signature_for_another_domain_is_rejected(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    """The domain version comes from the constructor: version "1" signatures must fail."""
    other: TokenInfo = dataclasses.replace(devchain.token, version="1")
    signature, auth = sign_transfer_authorization(
        payer, other, payee.address, 5, 0, devchain.block_timestamp() + HOUR
    )
    expect_revert(
        "FiatTokenV2: invalid signature", lambda: transfer(devchain, relayer, auth, signature)
    )


def test_expired_and_not_yet_valid(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    now = devchain.block_timestamp()
    signature, auth = sign_transfer_authorization(payer, devchain.token, payee.address, 5, 0, now)
    expect_revert(
        "FiatTokenV2: authorization is expired",
        lambda: transfer(devchain, relayer, auth, signature),
    )
    signature, auth = sign_transfer_authorization(
        payer, devchain.token, payee.address, 5, now + HOUR, now + 2 * HOUR
    )
    expect_revert(
        "FiatTokenV2: authorization is not yet valid",
        lambda: transfer(devchain, relayer, auth, signature),
    )


def test_validity_window_bounds_are_exclusive(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    """USDC requires validAfter < block.timestamp < validBefore (both strict).

    Blocks are pinned with evm_setNextBlockTimestamp and gas is fixed, so the transaction
    is mined (and reverts) in exactly the block under test.
    """
    t = devchain.block_timestamp() + 2

    def attempt(valid_after: int, valid_before: int, block_time: int) -> None:
        signature, auth = sign_transfer_authorization(
            payer, devchain.token, payee.address, 1, valid_after, valid_before
        )
        devchain.rpc.set_next_block_timestamp(block_time)
        transfer(devchain, relayer, auth, signature, gas=200_000)

    with pytest.raises(TransactionFailedError):
        attempt(valid_after=t, valid_before=t + HOUR, block_time=t)
    attempt(valid_after=t, valid_before=t + HOUR, block_time=t + 1)
    with pytest.raises(TransactionFailedError):
        attempt(valid_after=0, valid_before=t + 2, block_time=t + 2)
    attempt(valid_after=0, valid_before=t + 4, block_time=t + 3)
    assert devchain.balance_of(payee.address) == 2


# ------------------------------------------------------------- malformed ECDSA signatures


@pytest.mark.parametrize("overload", [TRANSFER_VRS, TRANSFER_BYTES], ids=["vrs", "bytes"])
def test_high_s_signature_is_rejected(
    devchain: Devchain,
    payer: LocalAccount,
    payee: LocalAccount,
    relayer: LocalAccount,
    overload: str,
) -> None:
    """(r, n - s, flipped v) recovers the same signer; USDC refuses it as malleable."""
    signature, auth = devchain_authorization(devchain, payer, payee.address, 7)
    v, r, s = split(signature)
    twin = pack(55 - v, r, (SECP256K1_N - int.from_bytes(s, "big")).to_bytes(32, "big"))
    expect_revert(
        "ECRecover: invalid signature 's' value",
        lambda: transfer(devchain, relayer, auth, twin, overload),
    )
    transfer(devchain, relayer, auth, signature, overload)  # the low-s original still works


def test_bad_v_zero_address_and_length_are_rejected(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    signature, auth = devchain_authorization(devchain, payer, payee.address, 7)
    v, r, s = split(signature)
    expect_revert(
        "ECRecover: invalid signature 'v' value",
        lambda: transfer(devchain, relayer, auth, pack(v - 27, r, s)),
    )
    unrecoverable = pack(27, b"\0" * 32, (1).to_bytes(32, "big"))
    expect_revert(
        "ECRecover: invalid signature", lambda: transfer(devchain, relayer, auth, unrecoverable)
    )
    expect_revert(
        "ECRecover: invalid signature length",
        lambda: transfer(devchain, relayer, auth, signature[:-2]),
    )


# ------------------------------------------------------------------- cancelAuthorization


@pytest.mark.parametrize("overload", [CANCEL_VRS, CANCEL_BYTES], ids=["vrs", "bytes"])
def test_cancel_authorization(
    devchain: Devchain,
    payer: LocalAccount,
    payee: LocalAccount,
    relayer: LocalAccount,
    overload: str,
) -> None:
    signature, auth = devchain_authorization(devchain, payer, payee.address, 9)
    nonce = bytes.fromhex(auth["nonce"][2:])
    mallory = devchain.new_account(usdc_atomic=0)
    forged = sign_cancel_authorization(mallory, devchain.token, nonce)
    function, forged_args = with_signature(overload, (payer.address, nonce), forged)
    expect_revert(
        "FiatTokenV2: invalid signature",
        lambda: submit(devchain, relayer, function, *forged_args),
    )

    cancel = sign_cancel_authorization(payer, devchain.token, nonce)
    _, args = with_signature(overload, (payer.address, nonce), cancel)
    receipt = submit(devchain, relayer, function, *args)

    assert devchain.authorization_state(payer.address, nonce)
    (event,) = receipt.logs
    assert event["topics"] == [CANCELED_TOPIC, topic(payer.address), auth["nonce"]]
    expect_revert(
        "FiatTokenV2: authorization is used or canceled",
        lambda: transfer(devchain, relayer, auth, signature),
    )
    expect_revert(
        "FiatTokenV2: authorization is used or canceled",
        lambda: submit(devchain, relayer, function, *args),
    )
    assert devchain.balance_of(payee.address) == 0


# -------------------------------------------------------------- receiveWithAuthorization


@pytest.mark.parametrize("overload", [RECEIVE_VRS, RECEIVE_BYTES], ids=["vrs", "bytes"])
def test_receive_with_authorization_requires_the_payee(
    devchain: Devchain,
    payer: LocalAccount,
    payee: LocalAccount,
    relayer: LocalAccount,
    overload: str,
) -> None:
    valid_before = devchain.block_timestamp() + HOUR
    signature, auth = sign_receive_authorization(
        payer, devchain.token, payee.address, 11, 0, valid_before
    )
    function, args = with_signature(overload, auth_args(auth), signature)
    expect_revert(
        "FiatTokenV2: caller must be the payee",
        lambda: submit(devchain, relayer, function, *args),
    )

    receipt = submit(devchain, payee, function, *args)

    assert devchain.balance_of(payee.address) == 11
    assert USED_TOPIC in {log["topics"][0] for log in receipt.logs}


def test_transfer_signature_is_not_a_receive_signature(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount
) -> None:
    """Distinct typehashes: a TransferWithAuthorization cannot be redeemed as a receive."""
    signature, auth = devchain_authorization(devchain, payer, payee.address, 11)
    function, args = with_signature(RECEIVE_BYTES, auth_args(auth), signature)
    expect_revert(
        "FiatTokenV2: invalid signature", lambda: submit(devchain, payee, function, *args)
    )


# ---------------------------------------------------------------------------- ERC-20


def test_insufficient_balance(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    signature, auth = devchain_authorization(devchain, payer, payee.address, 100_000_001)
    expect_revert(
        "ERC20: transfer amount exceeds balance",
        lambda: transfer(devchain, relayer, auth, signature),
    )
    assert not devchain.authorization_state(payer.address, auth["nonce"])
    expect_revert(
        "ERC20: transfer amount exceeds balance",
        lambda: submit(devchain, payee, "transfer(address,uint256)", payer.address, 1),
    )


def test_erc20_transfer_approve_transfer_from(
    devchain: Devchain, payer: LocalAccount, payee: LocalAccount, relayer: LocalAccount
) -> None:
    submit(devchain, payer, "transfer(address,uint256)", payee.address, 10)
    submit(devchain, payer, "approve(address,uint256)", relayer.address, 30)
    assert read(
        devchain, "allowance(address,address)", ["uint256"], payer.address, relayer.address
    ) == (30,)
    submit(
        devchain, relayer, "transferFrom(address,address,uint256)", payer.address, payee.address, 20
    )
    expect_revert(
        "ERC20: transfer amount exceeds allowance",
        lambda: submit(
            devchain,
            relayer,
            "transferFrom(address,address,uint256)",
            payer.address,
            payee.address,
            11,
        ),
    )
    assert devchain.balance_of(payee.address) == 30


def test_only_owner_mints(devchain: Devchain, payer: LocalAccount) -> None:
    supply_before = read(devchain, "totalSupply()", ["uint256"])[0]
    expect_revert(
        "EIP3009Token: caller is not the owner",
        lambda: submit(devchain, payer, "mint(address,uint256)", payer.address, 1),
    )
    devchain.mint(payer.address, 5)
    assert read(devchain, "totalSupply()", ["uint256"])[0] == supply_before + 5
