"""``python -m x402srv.devchain``: a local chain for your own seller (docs/local-chain.md).

    python -m x402srv.devchain up [--port 8545]          anvil + our EIP-3009 test token,
                                                         a funded buyer; runs until Ctrl-C
    python -m x402srv.devchain fund ADDRESS DOLLARS [--rpc URL] [--token ADDRESS]
                                                         mint test USDC to another buyer

``up`` prints what a seller's TOML and a buyer script need: the RPC URL, the
chain, the token (its address is the same on every fresh anvil: the first
contract of dev account #0), and anvil's dev accounts by role, keys included.
Those keys are public (anvil prints them too, from the mnemonic "test test ...
junk") and worthless off a local chain: never use them anywhere else.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from eth_account import Account

from x402srv.devchain.anvil import AnvilProcess, ensure_anvil
from x402srv.devchain.chain import DEV_PRIVATE_KEY
from x402srv.devchain.rpc import RpcClient
from x402srv.devchain.token import TokenInfo, balance_of, deploy_token, mint

__all__ = ["BUYER_KEY", "GAS_WALLET_KEY", "SELLER_ADDRESS", "main"]

GAS_WALLET_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"  # #1
BUYER_KEY = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"  # #2
SELLER_ADDRESS = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"  # #3: payTo
#: The token's address on a fresh anvil: dev #0's first contract (nonce 0).
TOKEN_ADDRESS = "0x5FbDB2315678afecb367f032d93F642f64180aa3"  # noqa: S105 - an address
BUYER_FUNDS = Decimal("100")


def _atomic(dollars: str) -> int:
    try:
        value = Decimal(dollars)
    except InvalidOperation:
        raise SystemExit(f"not an amount of dollars: {dollars!r}") from None
    if value <= 0 or value != value.quantize(Decimal("0.000001")):
        raise SystemExit(f"{dollars}: more than 0, at most 6 decimals")
    return int(value * 10**6)


def _token(rpc: RpcClient, address: str) -> TokenInfo:
    return TokenInfo(address, "USD Coin", "2", 6, rpc.chain_id())


def up(port: int) -> int:
    anvil = AnvilProcess(ensure_anvil(), port=port).start()
    try:
        with RpcClient(anvil.url) as rpc:
            deployer = Account.from_key(DEV_PRIVATE_KEY)
            token = deploy_token(rpc, deployer)
            buyer = Account.from_key(BUYER_KEY)
            mint(rpc, token, deployer, buyer.address, int(BUYER_FUNDS * 10**6))
            gas = Account.from_key(GAS_WALLET_KEY)
            print(
                f"""anvil       {anvil.url}  chain eip155:{token.chain_id}  pid {anvil.pid}
token       {token.address}  "USD Coin" v2, 6 decimals (EIP-3009, like USDC)
seller      {SELLER_ADDRESS}  payTo (anvil dev #3)
gas wallet  {gas.address}  key {GAS_WALLET_KEY}  (dev #1)
buyer       {buyer.address}  key {BUYER_KEY}  (dev #2)
            {balance_of(rpc, token, buyer.address) / 10**6:.2f} USDC
These keys are anvil's public dev keys: fine here, worthless anywhere else.
Running until Ctrl-C.""",
                flush=True,
            )
        stopped = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopped.set())
        stopped.wait()
    finally:
        anvil.stop()
    return 0


def fund(address: str, dollars: str, rpc_url: str, token_address: str) -> int:
    amount = _atomic(dollars)
    with RpcClient(rpc_url) as rpc:
        token = _token(rpc, token_address)
        mint(rpc, token, Account.from_key(DEV_PRIVATE_KEY), address, amount)
        print(f"{address} now holds {balance_of(rpc, token, address) / 10**6:.2f} USDC")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m x402srv.devchain", description="A local chain for your own seller."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="anvil, the test token and a funded buyer")
    start.add_argument("--port", type=int, default=8545, help="anvil's port (default 8545)")
    give = commands.add_parser("fund", help="mint test USDC to an address")
    give.add_argument("address")
    give.add_argument("dollars", help="e.g. 5.00")
    give.add_argument("--rpc", default="http://127.0.0.1:8545", help="default: port 8545")
    give.add_argument("--token", default=TOKEN_ADDRESS, help="default: the token up deploys")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.port)
    return fund(args.address, args.dollars, args.rpc, args.token)


if __name__ == "__main__":
    sys.exit(main())
