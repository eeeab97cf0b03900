"""Amounts as a person reads them: in the token's units and in US dollars.

Records, exports and the APIs keep atomic units (``"100000"``): exact, and what
the chain moved. Wherever a person reads an amount (the console, the command
line, a log line) it is shown the way Stripe's dashboard shows money,
``0.10 USDC ($0.10)``: the token's own units, then the dollar value for a USD
stablecoin (an asset whose EIP-712 name says USD, as ``figures.token_terms``
decides). A token the config no longer sells keeps its atomic units, said so.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from x402srv.config.models import Config

__all__ = ["Money", "amount_text", "money", "token_symbol"]

#: EIP-712 names whose ticker differs from the name.
_SYMBOLS = {"usd coin": "USDC"}


def token_symbol(asset_name: str) -> str:
    """``USDC`` for Circle's ``USD Coin``, else the token's EIP-712 name as configured."""
    return _SYMBOLS.get(asset_name.lower(), asset_name)


def _decimal_text(value: Decimal, *, grouped: bool) -> str:
    """At least two decimals, no trailing zeros past them: ``0.10``, ``0.0015``, ``1,200.00``."""
    whole, _, fraction = format(value, "f").partition(".")
    whole = f"{int(whole):,}" if grouped and whole.lstrip("-").isdigit() else whole
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


@dataclass(frozen=True, slots=True)
class Money:
    """One amount, shown: ``token`` (``0.10 USDC``) and ``usd`` (``$0.10``, or None)."""

    atomic: int
    token: str
    usd: str | None

    def __str__(self) -> str:
        return f"{self.token} ({self.usd})" if self.usd else self.token


def money(config: Config, network: str, asset: str, amount: int | str) -> Money:
    """``amount`` (atomic units of ``asset`` on ``network``) in the token's units and USD."""
    atomic = int(amount)
    option = config.option(network, asset)
    if option is None:
        return Money(atomic, f"{atomic:,} atomic units", None)
    value = Decimal(atomic).scaleb(-option.decimals)
    token = f"{_decimal_text(value, grouped=True)} {token_symbol(option.asset_name)}"
    pegged = "usd" in option.asset_name.lower()
    return Money(atomic, token, f"${_decimal_text(value, grouped=True)}" if pegged else None)


def amount_text(config: Config, network: str, asset: str, amount: int | str) -> str:
    """``0.10 USDC ($0.10)``: what a line for a person says about an amount."""
    return str(money(config, network, asset, amount))
