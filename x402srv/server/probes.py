"""What ``x402srv check`` asks the world after the config validated: settlers and RPCs.

    settler   started as serving starts it, then asked what ``/readyz`` asks it
              (``NetworkSettlers.readiness``: the facilitator answers ``/supported``
              and lists our network; the gas wallet's node answers and its balance
              covers gas)
    RPC       ``eth_chainId`` of each network's RPC, which must be its chain id

Each problem is a ``Finding``, printed as a warning (an error with
``--strict``). ``config`` findings are the config naming the wrong thing: an
RPC of another chain, or a settler that refuses to start on it (serving would
refuse to start too, exit 2). The others are a dependency that did not answer
or is not ready: serving starts, but cannot settle until it answers.

Nothing is written anywhere: the store is not opened, no transaction is sent.
Findings name the config key and the settler's label, never a URL's path or
credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from x402srv.config.models import Config, Network, SettlerSpec
from x402srv.config.secrets import redact_url
from x402srv.errors import ConfigError
from x402srv.interfaces import Settler
from x402srv.server.registry import Built
from x402srv.settlement.chain import ChainUnavailable
from x402srv.settlement.failover import FailoverSettler
from x402srv.settlement.readiness import CHECK_TIMEOUT_SECONDS

__all__ = ["Finding", "probe"]

#: A settler's start (connect, ask) gets this long before it counts as unreachable.
START_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Finding:
    """One problem a probe found; ``config`` when the config names the wrong thing."""

    text: str
    config: bool


async def probe(config: Config, built: Built) -> list[Finding]:
    """Start every settler, ask each what ``/readyz`` asks, read each RPC's chain id."""
    findings: list[Finding] = []
    with _quiet():  # the findings say it once; the plugins' own warnings would say it twice
        try:
            started = await asyncio.gather(
                *(_start(spec, settler, findings) for spec, settler in _settlers(config, built))
            )
            failed = {label for label, ok in started if not ok}
            _, states = await built.settlers.readiness()
            labels = {spec.short_label: spec for spec, _ in _settlers(config, built)}
            for state in states:
                spec = labels.get(str(state["settler"]))
                if spec is None or spec.short_label in failed or state["check"] == "ok":
                    continue
                findings.append(
                    Finding(f"{spec.path}: {spec.label} is not ready: {state['check']}", False)
                )
            await asyncio.gather(
                *(
                    _chain_id(config, network, built, findings)
                    for network in config.resolved_networks
                )
            )
        finally:
            await built.settlers.close()
            await built.close_chains()
    return findings


def _settlers(config: Config, built: Built) -> Iterator[tuple[SettlerSpec, Settler]]:
    """Every configured settler with its spec: a failover's members one by one."""
    for network in config.resolved_networks:
        settler = built.settlers.settlers[network.caip2]
        if isinstance(settler, FailoverSettler):
            for member in settler.members:
                yield member.spec, member.settler
        else:
            yield network.settlers[0], settler


async def _start(spec: SettlerSpec, settler: Settler, findings: list[Finding]) -> tuple[str, bool]:
    try:
        await asyncio.wait_for(settler.start(), START_TIMEOUT_SECONDS)
    except ConfigError as exc:
        findings.append(Finding(f"{exc} (serving refuses to start)", True))
    except TimeoutError:
        findings.append(Finding(f"{spec.path}: {spec.label} did not answer in time", False))
    except Exception as exc:  # a settler that cannot start is one that cannot settle
        findings.append(
            Finding(f"{spec.path}: {spec.label} cannot start ({type(exc).__name__})", False)
        )
    else:
        return spec.short_label, True
    return spec.short_label, False


async def _chain_id(
    config: Config, network: Network, built: Built, findings: list[Finding]
) -> None:
    chain = built.chains.get(network.caip2)
    if chain is None or network.rpc_url is None:
        return
    where = (
        f"{_rpc_key(config, network)}: the RPC of {network.caip2} ({redact_url(network.rpc_url)})"
    )
    try:
        chain_id = await asyncio.wait_for(chain.chain_id(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        findings.append(Finding(f"{where} did not answer in time", False))
    except (ChainUnavailable, ValueError, TypeError) as exc:
        findings.append(Finding(f"{where} cannot be reached ({exc})", False))
    else:
        if chain_id != network.chain_id:
            findings.append(
                Finding(f"{where} serves chain {chain_id}, not {network.chain_id}", True)
            )


def _rpc_key(config: Config, network: Network) -> str:
    """The key that gave ``network`` its RPC URL."""
    if network.path != "seller.network":
        return f"{network.path}.rpc_url"
    if config.settlement.rpc_url is not None:
        return "settlement.rpc_url"
    if config.network is not None and config.network.rpc_url is not None:
        return "network.rpc_url"
    return "seller.network"  # the known network's default RPC


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
