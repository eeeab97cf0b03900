"""Sign-in-with-x helpers: what the SDK's client sends, and contract wallets that sign.

``signed_in`` builds a header with the official SDK's own payload builder and
encoder. ``SmartWallets`` deploys our ERC-1271 test wallet
(``contracts/SmartWallet.sol``) on anvil, or only computes where its factory
would put it, and signs as such a wallet: its owner's EIP-191 signature of the
message, bare (a deployed wallet) or wrapped the EIP-6492 way (one that is not
deployed yet).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import time
from typing import Any

import httpx
from eth_abi.abi import encode
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_typing import Hash32
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from x402.extensions.sign_in_with_x import (
    SIGN_IN_WITH_X,
    SIWxPayload,
    create_siwx_message,
    create_siwx_payload,
    encode_siwx_header,
)

from x402srv.access.records import State
from x402srv.devchain import Devchain, load_artifact
from x402srv.devchain.token import encode_call
from x402srv.interfaces import Store
from x402srv.settlement.contract_signatures import EIP6492_SUFFIX
from x402srv.testing.builders import make_grant, make_key, make_record, new_tx_hash
from x402srv.testing.store_contract_base import applied, created, delivering, paid, settling
from x402srv.wire.siwx import iso_time


def declared_info(answer: httpx.Response) -> dict[str, Any]:
    """A 402's sign-in-with-x message, with its first chain chosen (as the SDK's client does)."""
    declared: dict[str, Any] = answer.json()["extensions"][SIGN_IN_WITH_X]
    chain = declared["supportedChains"][0]
    return {**declared["info"], "chainId": chain["chainId"], "type": chain["type"]}


async def signed_in(answer: httpx.Response, buyer: LocalAccount, url: str) -> str:
    """What the SDK's client sends for this 402 (its own payload builder and encoder)."""
    payload = await create_siwx_payload(declared_info(answer), buyer, url)
    return encode_siwx_header(payload)


def siwe_text(document: dict[str, Any]) -> str:
    """The message the SDK signs for this payload (its own formatter)."""
    payload = SIWxPayload.model_validate(document)
    return create_siwx_message(payload, payload.address)


def decode_siwx(header: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(base64.b64decode(header))
    return document


def encode_siwx(document: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


def personal_sign(account: LocalAccount, text: str) -> bytes:
    return bytes(account.sign_message(encode_defunct(text=text)).signature)


def personal_sign_hash(account: LocalAccount, digest: bytes) -> bytes:
    """``account``'s bare ECDSA signature of ``digest`` (what our wallet's owner gives)."""
    return bytes(account.unsafe_sign_hash(Hash32(digest)).signature)


class SmartWallets:
    """Our ERC-1271 wallets on anvil, made by one CREATE2 factory."""

    def __init__(self, devchain: Devchain) -> None:
        self.devchain = devchain
        self.deployer = devchain.new_account()
        factory = load_artifact("SmartWalletFactory.json")
        receipt = devchain.rpc.send_transaction(self.deployer, to=None, data=factory.bytecode)
        assert receipt.contract_address is not None
        self.factory = receipt.contract_address
        self.wallet_code = load_artifact("SmartWallet.json").bytecode

    def address(self, owner: str, salt: bytes) -> str:
        """Where the factory puts ``owner``'s wallet for ``salt`` (EIP-1014), deployed or not."""
        init_code = self.wallet_code + encode(["address"], [owner])
        raw = keccak(b"\xff" + bytes.fromhex(self.factory[2:]) + salt + keccak(init_code))
        return to_checksum_address(raw[-20:])

    def deploy_call(self, owner: str, salt: bytes) -> bytes:
        return encode_call("deploy(address,bytes32)", owner, salt)

    def deployed(self, owner: LocalAccount) -> str:
        """A wallet of ``owner``'s, deployed now."""
        salt = secrets.token_bytes(32)
        self.devchain.rpc.send_transaction(
            self.deployer, to=self.factory, data=self.deploy_call(owner.address, salt)
        )
        wallet = self.address(owner.address, salt)
        assert self.devchain.rpc.call("eth_getCode", [wallet, "latest"]) not in ("0x", "")
        return wallet

    def has_code(self, wallet: str) -> bool:
        return self.devchain.rpc.call("eth_getCode", [wallet, "latest"]) not in ("0x", "")

    def counterfactual(self, owner: LocalAccount) -> tuple[str, bytes]:
        """A wallet of ``owner``'s that is not deployed: its address and its salt."""
        salt = secrets.token_bytes(32)
        return self.address(owner.address, salt), salt

    def wrap_6492(self, owner: str, salt: bytes, signature: bytes) -> bytes:
        """ERC-6492: the factory, the calldata deploying the wallet, the signature, the suffix."""
        wrapped = encode(
            ["address", "bytes", "bytes"], [self.factory, self.deploy_call(owner, salt), signature]
        )
        return wrapped + EIP6492_SUFFIX


async def wallet_sign_in(
    answer: httpx.Response,
    url: str,
    wallet: str,
    signer: LocalAccount,
    wrap: Any = None,
) -> str:
    """A header for this 402 whose address is ``wallet``, signed by ``signer`` (its owner or not).

    The SDK's builder makes the payload for ``signer``; the address is then the
    wallet's and the message signed again, as a contract wallet's app does.
    ``wrap`` turns the bare signature into what is sent (EIP-6492).
    """
    payload = await create_siwx_payload(declared_info(answer), signer, url)
    document = payload.model_dump(by_alias=True, exclude_none=True)
    document["address"] = wallet
    signature = personal_sign(signer, siwe_text(document))
    document["signature"] = "0x" + (wrap(signature) if wrap else signature).hex()
    return encode_siwx(document)


async def delivered_grant(
    store: Store, *, payer: str, network: str, plan_id: str = "hourly"
) -> dict[str, Any]:
    """A delivered, live grant of ``plan_id`` held by ``payer``, written through ``store``.

    For a contract wallet: x402srv takes EOA payments only (an EIP-3009
    authorization whose 65-byte signature recovers to its ``from``), so a
    contract wallet cannot buy through it; what sign-in reads is this record,
    moved through the states a purchase moves it through.
    """
    now = time.time()
    record = make_record(at=now, expires_at=now + 900, network=network, plan_id=plan_id)
    await created(store, record)
    key = make_key(payer=payer)
    settled = applied(await store.transition(settling(record, key, at=now + 1)))
    settle = paid(settled, new_tx_hash(), at=now + 2)
    settle = dataclasses.replace(settle, changes=dataclasses.replace(settle.changes, payer=payer))
    done = applied(await store.transition(settle))
    grant = make_grant(done, expiresAt=iso_time(now + 3600).split(".")[0] + "Z")
    delivered = applied(await store.transition(delivering(done, grant, at=now + 3)))
    assert delivered.state is State.DELIVERED and delivered.payer == payer
    assert delivered.grant is not None
    return delivered.grant
