"""Wall time of one paid purchase through the official x402 client, per strategy.

    .venv/bin/python -m bench.paid_request [--n 20]

Starts anvil, our token, a local official-SDK facilitator and one x402srv
process per strategy (sqlite store, one worker); each sample is a fresh buyer
doing the full challenge-first exchange (402, sign, paid retry, 200).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from eth_account import Account

from x402srv.devchain import Devchain
from x402srv.testing.buyers import paying_client
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import ServerProcess, seller_config


async def sample(url: str, chain: Devchain, n: int) -> list[float]:
    times = []
    for _ in range(n):
        buyer = chain.new_account()
        http, _ = paying_client(buyer)
        async with http:
            started = time.perf_counter()
            response = await http.post(url, json={"planId": "hourly"})
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args()
    with Devchain.start() as chain, tempfile.TemporaryDirectory() as tmp:
        gas = chain.new_account(eth=1000, usdc_atomic=0)
        signer = chain.new_account(eth=1000, usdc_atomic=0)
        facilitator = FacilitatorProcess(chain, "0x" + bytes(signer.key).hex(), Path(tmp) / "f.log")
        strategies = {
            "gas-wallet": {
                "strategy": "gas-wallet",
                "gas_wallet_private_key": {"env": "BENCH_GAS_KEY"},
            },
            "facilitator": {"strategy": "facilitator", "facilitator_url": facilitator.url},
        }
        env = {"BENCH_GAS_KEY": "0x" + bytes(gas.key).hex()}
        print(f"cores: {os.cpu_count()}  samples per strategy: {args.n}")
        try:
            for name, settlement in strategies.items():
                config = seller_config(
                    rpc_url=chain.rpc_url,
                    chain_id=chain.chain_id,
                    asset=chain.token.address,
                    wallet_address=Account.create().address,
                    store={"backend": "sqlite", "path": "x402srv.db"},
                    settlement=settlement,
                )
                with ServerProcess(config, Path(tmp) / name, env=env) as server:
                    asyncio.run(sample(server.access_url, chain, 3))  # warm-up
                    times = asyncio.run(sample(server.access_url, chain, args.n))
                q = statistics.quantiles(times, n=100)
                print(
                    f"{name:12s} one paid purchase (402 + sign + paid retry): "
                    f"median {statistics.median(times):6.1f} ms  p90 {q[89]:6.1f} ms  "
                    f"min {min(times):6.1f} ms"
                )
        finally:
            facilitator.stop()


if __name__ == "__main__":
    main()
