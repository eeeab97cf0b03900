"""``[settlement.gas-wallet]``: the knobs of the gas-wallet settler.

The key and the RPC URL are not here on purpose: they are the core's
``settlement.gas_wallet_private_key`` (a secret) and the network's RPC, so
``x402srv check`` redacts them like every other secret.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from x402srv.plugin import PluginOptions

__all__ = ["LEASE_MARGIN_SECONDS", "GasWalletOptions"]

#: Time a settlement needs besides waiting for the receipt (simulation, fees,
#: signing, the store writes, the pipeline's own slack). The receipt wait must
#: end this long before the SETTLING lease does, or a second attempt could
#: start while this one still waits.
LEASE_MARGIN_SECONDS = 10.0


def _a_number(value: Any) -> Any:
    """A TOML number only: ``"50"`` or ``true`` is refused, not converted (strict config)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        given = {bool: "a boolean", str: "a string", list: "an array"}.get(type(value), "a table")
        raise ValueError(f"expected a number, got {given}")
    return value


class GasWalletOptions(PluginOptions):
    """Validated options; every field is used by the settler."""

    receipt_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """How long to poll for the receipt before answering ``Unknown`` (the chain decides later)."""

    poll_interval_seconds: float = Field(default=0.5, gt=0, le=30)
    """Pause between receipt polls."""

    rpc_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    """Per-request timeout of the node; a send that times out counts as ambiguous."""

    nonce_lease_seconds: float = Field(default=10.0, gt=0, le=300)
    """TTL of the cross-process nonce lease: the longest a holder that crashed on another
    host blocks others (one on this host is taken over at once)."""

    nonce_retries: int = Field(default=3, ge=0, le=10)
    """Re-sends with a fresh nonce after "nonce too low"-type refusals."""

    gas_limit: int | None = Field(default=None, gt=21_000, le=10_000_000)
    """Fixed gas limit; unset means ``eth_estimateGas`` plus 25 %."""

    max_fee_per_gas_gwei: Annotated[Decimal, BeforeValidator(_a_number)] | None = Field(
        default=None, gt=0, strict=False
    )
    """Cap on ``maxFeePerGas``; above it nothing is sent and the payment is refused."""

    min_balance_wei: int = Field(default=10**15, ge=0)
    """``/readyz`` reports not ready below this balance (default 0.001 ETH)."""

    @model_validator(mode="after")
    def _rpc_fits_in_nonce_lease(self) -> GasWalletOptions:
        if self.rpc_timeout_seconds >= self.nonce_lease_seconds:
            raise ValueError(
                ".nonce_lease_seconds: must be longer than rpc_timeout_seconds: the lease "
                "covers reading the nonce and sending the transaction"
            )
        return self

    @property
    def max_fee_per_gas_wei(self) -> int | None:
        if self.max_fee_per_gas_gwei is None:
            return None
        return int(self.max_fee_per_gas_gwei * 10**9)
