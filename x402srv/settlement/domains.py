"""At start-up: does each configured token sign with the EIP-712 domain we offer?

A buyer signs the domain our 402 names (``extra.name``/``extra.version``, the
chain id, the token's address) and the token verifies against its own
``DOMAIN_SEPARATOR``. If the two differ (a wrong name or version in the TOML,
or a wrong entry in a built-in table) every payment in that token fails at
settlement. ``check_domains`` reads ``DOMAIN_SEPARATOR()`` of every token of
every network with an RPC and compares it with ours: a mismatch is logged as
an error naming the token; a token or node that cannot answer, as a warning.
Neither stops the server (the chain may be briefly unreachable; other tokens
and networks still sell).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from eth_utils.crypto import keccak

from x402srv.config.models import Config
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.wire.eip712 import Eip3009Domain

__all__ = ["check_domains"]

log = logging.getLogger("x402srv.settlement.domains")

_DOMAIN_SEPARATOR = "0x" + keccak(text="DOMAIN_SEPARATOR()")[:4].hex()


async def check_domains(config: Config, chains: Mapping[str, ChainReader]) -> list[str]:
    """Log (and return) the tokens whose on-chain domain is not the configured one."""
    wrong: list[str] = []
    for network in config.resolved_networks:
        chain = chains.get(network.caip2)
        if chain is None:
            continue
        try:
            chain_id = await chain.chain_id()
        except ChainUnavailable as exc:
            log.warning("%s: cannot check the tokens' EIP-712 domains: %s", network.caip2, exc)
            continue
        if chain_id != network.chain_id:
            log.error(
                "%s (%s): its RPC serves chain %d, not %d: no payment will verify there",
                network.caip2,
                network.path,
                chain_id,
                network.chain_id,
            )
            wrong.extend(f"{network.caip2} {token.asset}" for token in network.tokens)
            continue
        for option in network.options:
            ours = Eip3009Domain(
                option.asset_name, option.asset_version, option.chain_id, option.asset
            ).separator
            try:
                call = {"to": option.asset, "data": _DOMAIN_SEPARATOR}
                theirs = await chain.call("eth_call", [call, "latest"])
            except ChainUnavailable as exc:
                log.warning(
                    "token %s on %s: cannot read its DOMAIN_SEPARATOR (%s); its EIP-712 "
                    "domain is not checked",
                    option.asset,
                    network.caip2,
                    exc,
                )
                continue
            if isinstance(theirs, str) and theirs.lower() == "0x" + ours.hex():
                continue
            wrong.append(f"{network.caip2} {option.asset}")
            log.error(
                "token %s on %s: its on-chain EIP-712 domain is not name=%r version=%r "
                "chainId=%d verifyingContract=%s; buyers' signatures will not verify: check "
                "its EIP-712 name and version (%s)",
                option.asset,
                network.caip2,
                option.asset_name,
                option.asset_version,
                option.chain_id,
                option.asset,
                network.path,
            )
    return wrong
