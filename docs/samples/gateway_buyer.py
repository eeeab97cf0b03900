"""Pay the gateway once, then call it with the token it handed back: no second payment."""

import httpx
from x402 import x402Client
from x402.http.clients import x402HttpxClient


async def two_forecasts(client: x402Client, gateway: str) -> tuple[httpx.Response, httpx.Response]:
    async with x402HttpxClient(client) as http:  # client: as in "Buying from Python"
        first = await http.get(f"{gateway}/api/forecast?city=berlin")  # pays once
        token = first.headers["X-X402-Access-Token"]
        later = await http.get(
            f"{gateway}/api/forecast?city=paris",
            headers={"Authorization": f"Bearer {token}"},  # no payment
        )
    return first, later
