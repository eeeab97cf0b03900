"""The seller's TOML, validated into pydantic models (SPEC 2).

Unknown keys are errors, and every error names its key path
(``plans[1].unit_amount: ...``). Secrets are a string or ``{env = "NAME"}`` /
``{file = "path"}`` and become ``Secret`` objects whose ``repr`` and
serialisation never show the value. Prices are turned into the token's atomic
units here, once, with the decimals of the configured network.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from eth_utils.address import is_checksum_address, to_checksum_address
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import ConfigError
from .gateway.route_config import RouteConfig, check_routes
from .interfaces import RateWindow
from .networks import KNOWN_NETWORKS, NetworkInfo, canonical_network_name
from .plan_terms import CALLS_TOKEN_TTL_SECONDS, parse_rate_limit
from .secret_values import (
    HttpUrlSecret,
    Secret,
    SecretValue,
    redact_url,
    url_secret,
    validation_context,
)
from .validation_errors import problems

__all__ = [
    "Config",
    "CredentialsConfig",
    "MetricsConfig",
    "NetworkConfig",
    "Plan",
    "PlanConfig",
    "PreviousKey",
    "RateLimitConfig",
    "ReconcilerConfig",
    "Secret",
    "SellerConfig",
    "ServerConfig",
    "SettlementConfig",
    "StoreConfig",
    "load_config",
    "parse_config",
    "redact_url",
]


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_PLAN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_PRICE = re.compile(r"\$([0-9]+)(?:\.([0-9]+))?")
_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")


def _checksum(value: str) -> str:
    if not _ADDRESS.fullmatch(value):
        raise ValueError("must be a 0x-prefixed 20-byte hex address")
    body = value[2:]
    if body != body.lower() and body != body.upper() and not is_checksum_address(value):
        raise ValueError("mixed-case address with a wrong EIP-55 checksum")
    return str(to_checksum_address(value))


def _http_url(value: str, *, trailing_slash: bool = True) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    if not trailing_slash and value.endswith("/"):
        raise ValueError("must not end with '/'")
    if not trailing_slash and (parts.query or parts.fragment):
        raise ValueError("must not have a query or fragment")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _PluginTables(_Model):
    """A section whose extra keys are option tables of plugins (``[store.redis]``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="after")
    def _extra_keys_are_tables(self) -> _PluginTables:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                # A leading "." asks _format_error to append the key to the section's path.
                raise ValueError(
                    f".{key}: unknown key (only plugin option tables may be added here)"
                )
        return self

    def __repr_args__(self) -> Any:
        extra = self.model_extra or {}
        for name, value in super().__repr_args__():
            yield name, ("<plugin options>" if name in extra else value)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self.model_extra or {}:
            if isinstance(data, dict) and isinstance(data.get(name), dict):
                data[name] = _redact_options(data[name])
        return data

    def plugin_options(self, name: str) -> dict[str, Any]:
        value = (self.model_extra or {}).get(name)
        return dict(value) if isinstance(value, dict) else {}

    def plugin_tables(self) -> list[str]:
        return sorted(self.model_extra or {})


class SellerConfig(_Model):
    agent_name: str = Field(min_length=1)
    agent_description: str = Field(min_length=1)
    agent_url: str
    provider_name: str = Field(min_length=1)
    provider_url: str
    wallet_address: str
    network: str
    agent_version: str = "1.0.0"

    @field_validator("agent_url")
    @classmethod
    def _agent_url(cls, value: str) -> str:
        return _http_url(value, trailing_slash=False)

    @field_validator("provider_url")
    @classmethod
    def _provider_url(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("wallet_address")
    @classmethod
    def _wallet(cls, value: str) -> str:
        return _checksum(value)

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        name = canonical_network_name(value)
        if name in KNOWN_NETWORKS or re.fullmatch(r"eip155:[1-9][0-9]{0,18}", name):
            return name
        known = ", ".join([*KNOWN_NETWORKS, "mainnet", "testnet", "eip155:<chain id>"])
        raise ValueError(f"unknown network {value!r} (known: {known})")


class PlanConfig(_Model):
    plan_id: str
    unit_amount: str
    description: str = Field(min_length=1)
    token_ttl_seconds: int = Field(default=3600, gt=0)
    # Selling calls (x402srv/plan_terms.py): credits per grant, a rate limit per grant.
    calls: int | None = Field(default=None, gt=0, le=10**12)
    rate_limit: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _calls_period(cls, data: Any) -> Any:
        """A plan that sells calls and names no period lives CALLS_TOKEN_TTL_SECONDS."""
        if isinstance(data, dict) and data.get("calls") is not None:
            return {"token_ttl_seconds": CALLS_TOKEN_TTL_SECONDS, **data}
        return data

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate_limit(value)
        return value

    @field_validator("plan_id")
    @classmethod
    def _plan_id(cls, value: str) -> str:
        if not _PLAN_ID.fullmatch(value):
            raise ValueError("must match [A-Za-z0-9._-]{1,64}")
        return value

    @field_validator("unit_amount")
    @classmethod
    def _unit_amount(cls, value: str) -> str:
        if not _PRICE.fullmatch(value):
            raise ValueError('must look like "$0.10" (a dollar sign and a decimal)')
        return value


class ServerConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8402, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=256)
    base_path: str = ""
    a2a_path: str = "/a2a"
    challenge_ttl_seconds: int = Field(default=900, gt=0)
    max_timeout_seconds: int = Field(default=300, ge=10, le=86_400)
    cors_origins: list[str] = Field(default_factory=lambda: ["*"])
    # /readyz answers from its last checks for this long: probes never hammer the RPC.
    readiness_cache_seconds: float = Field(default=2.0, ge=0, le=300)

    @field_validator("base_path")
    @classmethod
    def _base_path(cls, value: str) -> str:
        if value and not _PATH.fullmatch(value):
            raise ValueError('must be "" or a path like "/pay" (no trailing slash)')
        return value

    @field_validator("a2a_path")
    @classmethod
    def _a2a_path(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError('must be a path like "/a2a" (no trailing slash)')
        return value


class StoreConfig(_PluginTables):
    backend: str = "sqlite"
    path: str = "x402srv.db"
    url: (
        Annotated[
            SecretValue,
            url_secret("redis", "rediss", "unix", hosts_listed=("redis+sentinel",)),
        ]
        | None
    ) = None


class SettlementConfig(_PluginTables):
    strategy: str | None = None
    facilitator_url: HttpUrlSecret | None = None
    facilitator_auth: SecretValue | None = None
    gas_wallet_private_key: SecretValue | None = None
    rpc_url: HttpUrlSecret | None = None
    lease_seconds: int = Field(default=120, ge=5, le=3600)

    @property
    def selected_strategy(self) -> str:
        """The seed's rule: a gas wallet key without a strategy selects ``gas-wallet``."""
        if self.strategy:
            return self.strategy
        return "gas-wallet" if self.gas_wallet_private_key else "facilitator"


class PreviousKey(_Model):
    """A retired signing key that still verifies tokens it signed (rotation)."""

    key: SecretValue
    kid: str | None = Field(default=None, min_length=1, max_length=128)


def _previous_key(value: Any) -> Any:
    # A bare secret (string, {env}, {file}) is a key with a derived kid.
    if isinstance(value, str) or (isinstance(value, dict) and set(value) <= {"env", "file"}):
        return {"key": value}
    return value


class CredentialsConfig(_PluginTables):
    issuer: str = "jwt"
    secret: SecretValue | None = None
    algorithm: Literal["HS256", "EdDSA"] = "HS256"
    private_key: SecretValue | None = None
    audience: str | None = None
    kid: str | None = Field(default=None, min_length=1, max_length=128)
    callback: str | None = None
    callback_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    previous_keys: list[Annotated[PreviousKey, BeforeValidator(_previous_key)]] = Field(
        default_factory=list, max_length=16
    )


class ReconcilerConfig(_Model):
    """``[reconciler]``: the background task that finishes what requests left behind."""

    enabled: bool = True
    interval_seconds: float = Field(default=30.0, ge=1, le=3600)
    grace_seconds: float = Field(default=60.0, ge=0, le=86_400)
    retention_days: float = Field(default=30.0, gt=0, le=3650)
    # Never-paid records (expired, cancelled, stale PENDING) and unpaid A2A tasks.
    unpaid_retention_hours: float = Field(default=6.0, gt=0, le=87_600)
    batch_size: int = Field(default=200, ge=1, le=10_000)


class RateLimitConfig(_Model):
    """``[rate_limit]``: unpaid requests (discovery, challenges, A2A) per client and window.

    Requests that carry a payment are never limited. ``client_ip_header`` names
    a header whose first hop is the client's address (``X-Forwarded-For``,
    ``X-Real-IP``); set it only behind a proxy that writes that header itself,
    since a client can send any value it likes.
    """

    enabled: bool = True
    unpaid_requests: int = Field(default=600, ge=1, le=100_000_000)
    window_seconds: float = Field(default=60.0, ge=1, le=86_400)
    client_ip_header: str | None = Field(default=None, min_length=1, max_length=64)


class MetricsConfig(_Model):
    """``[metrics]``: Prometheus text at ``path`` (needs the ``metrics`` extra)."""

    enabled: bool = False
    path: str = "/metrics"

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError('must be a path like "/metrics"')
        return value


class NetworkConfig(_Model):
    """``[network]``: the token and chain of a custom ``eip155:<id>`` network."""

    asset: str | None = None
    asset_name: str | None = None
    asset_version: str | None = None
    decimals: int = Field(default=6, ge=0, le=36)
    rpc_url: HttpUrlSecret | None = None
    explorer_tx_url: str | None = None

    @field_validator("asset")
    @classmethod
    def _asset(cls, value: str | None) -> str | None:
        return None if value is None else _checksum(value)


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan with its price in atomic units of the configured token."""

    plan_id: str
    unit_amount: str
    description: str
    token_ttl_seconds: int
    amount: int
    calls: int | None = None  # credits a purchase adds (x402srv/plan_terms.py)
    rate: RateWindow | None = None  # calls per grant and window

    @property
    def metered(self) -> bool:
        """Whether calls under this plan go through the store (credits or a rate limit)."""
        return self.calls is not None or self.rate is not None


class Config(_Model):
    seller: SellerConfig
    plans: list[PlanConfig] = Field(min_length=1)
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    settlement: SettlementConfig = SettlementConfig()
    credentials: CredentialsConfig = CredentialsConfig()
    reconciler: ReconcilerConfig = ReconcilerConfig()
    rate_limit: RateLimitConfig = RateLimitConfig()
    metrics: MetricsConfig = MetricsConfig()
    network: NetworkConfig | None = None
    routes: list[RouteConfig] = []  # gateway mode: x402srv/gateway/route_config.py

    _network_info: NetworkInfo = PrivateAttr()
    _plans: dict[str, Plan] = PrivateAttr()
    _base_dir: Path = PrivateAttr(default=Path("."))
    _env: Mapping[str, str] = PrivateAttr(default_factory=lambda: os.environ)

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Config:
        self._base_dir, self._env = validation_context(info)
        self._network_info = self._resolve_network()
        self._plans = self._resolve_plans(self._network_info.decimals)
        check_routes(self)
        longest = max(p.token_ttl_seconds for p in self._plans.values())
        keep = self.reconciler.retention_days * 86_400
        if keep < longest + self.server.max_timeout_seconds + self.server.challenge_ttl_seconds:
            raise ValueError(
                "reconciler.retention_days: records must be kept longer than the longest "
                "token lifetime plus the payment and challenge windows (replays need them)"
            )
        unpaid = self.reconciler.unpaid_retention_hours * 3600
        if unpaid <= self.server.challenge_ttl_seconds + self.server.max_timeout_seconds:
            raise ValueError(
                "reconciler.unpaid_retention_hours: unpaid records must be kept longer than "
                "a challenge and its payment window live (server.challenge_ttl_seconds + "
                "server.max_timeout_seconds)"
            )
        return self

    def _resolve_network(self) -> NetworkInfo:
        name = self.seller.network
        override = self.settlement.rpc_url.reveal() if self.settlement.rpc_url else None
        table = self.network
        if name in KNOWN_NETWORKS:
            known = KNOWN_NETWORKS[name]
            if table is not None and (
                table.asset
                or table.asset_name
                or table.asset_version
                or "decimals" in (table.model_fields_set)
            ):
                raise ValueError(
                    f"network: the token of {name} is fixed; [network] asset keys are only "
                    "for custom eip155:<id> networks"
                )
            rpc = table.rpc_url.reveal() if table and table.rpc_url else known.rpc_url
            explorer = table.explorer_tx_url if table and table.explorer_tx_url else None
            return NetworkInfo(
                name=known.name,
                caip2=known.caip2,
                chain_id=known.chain_id,
                asset=known.asset,
                asset_name=known.asset_name,
                asset_version=known.asset_version,
                decimals=known.decimals,
                rpc_url=override or rpc,
                explorer_tx_url=explorer or known.explorer_tx_url,
                default_facilitator_url=known.default_facilitator_url,
            )
        if table is None:
            raise ValueError(f"network: a custom network {name} needs a [network] table")
        missing = [k for k in ("asset", "asset_name", "asset_version") if not getattr(table, k)]
        if missing:
            raise ValueError(f"network: {', '.join(missing)} required for {name}")
        return NetworkInfo(
            name=name,
            caip2=name,
            chain_id=int(name.split(":", 1)[1]),
            asset=str(table.asset),
            asset_name=str(table.asset_name),
            asset_version=str(table.asset_version),
            decimals=table.decimals,
            rpc_url=override or (table.rpc_url.reveal() if table.rpc_url else None),
            explorer_tx_url=table.explorer_tx_url,
            default_facilitator_url=None,
        )

    def _resolve_plans(self, decimals: int) -> dict[str, Plan]:
        plans: dict[str, Plan] = {}
        for index, plan in enumerate(self.plans):
            path = f"plans[{index}]"
            if plan.plan_id in plans:
                raise ValueError(f"{path}.plan_id: duplicate plan id {plan.plan_id!r}")
            amount = _atomic_amount(plan.unit_amount, decimals, f"{path}.unit_amount")
            plans[plan.plan_id] = Plan(
                plan_id=plan.plan_id,
                unit_amount=plan.unit_amount,
                description=plan.description,
                token_ttl_seconds=plan.token_ttl_seconds,
                amount=amount,
                calls=plan.calls,
                rate=parse_rate_limit(plan.rate_limit) if plan.rate_limit else None,
            )
        return plans

    @property
    def network_info(self) -> NetworkInfo:
        return self._network_info

    @property
    def plan_map(self) -> dict[str, Plan]:
        return self._plans

    @property
    def meters_calls(self) -> bool:
        """Whether any plan sells calls or limits their rate (the store must keep credits)."""
        return any(plan.metered for plan in self._plans.values())

    @property
    def env(self) -> Mapping[str, str]:
        """The environment ``{ env = ... }`` secrets were read from (plugin options use it too)."""
        return self._env

    @property
    def base_dir(self) -> Path:
        """Directory of the config file; relative paths in it are resolved from here."""
        return self._base_dir

    @property
    def access_url(self) -> str:
        return f"{self.seller.agent_url}{self.server.base_path}/x402/access"

    def describe(self) -> dict[str, Any]:
        """The resolved config for ``x402srv check``: no secret, no credentialed URL."""
        data = self.model_dump(mode="json")  # plugin tables come out redacted
        info = self._network_info
        data["settlement"]["strategy"] = self.settlement.selected_strategy
        data["resolved"] = {
            "network": {
                "name": info.name,
                "caip2": info.caip2,
                "chain_id": info.chain_id,
                "asset": info.asset,
                "eip712": {"name": info.asset_name, "version": info.asset_version},
                "decimals": info.decimals,
                "rpc_url": redact_url(info.rpc_url) if info.rpc_url else None,
            },
            "access_url": self.access_url,
            "plans": {p.plan_id: {"amount": str(p.amount)} for p in self._plans.values()},
        }
        return data


_UINT256_MAX = 2**256 - 1
_SECRET_KEY = re.compile(r"url|password|secret|key|token|auth", re.IGNORECASE)


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and ("env" in value or "file" in value):
        kind, name = next(iter(value.items()))
        return f"<secret: {kind} {name}>"
    if isinstance(value, dict):
        return _redact_options(value)
    if isinstance(value, list):
        return [_redact_value(key, item) for item in value]
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    if isinstance(value, str) and _SECRET_KEY.search(key):
        return "<redacted>"
    return value


def _redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Plugin tables are opaque to the core: hide whatever looks like a secret or a URL."""
    return {key: _redact_value(key, value) for key, value in options.items()}


def _atomic_amount(price: str, decimals: int, path: str) -> int:
    match = _PRICE.fullmatch(price)
    assert match is not None  # checked by PlanConfig
    whole, fraction = match.group(1), match.group(2) or ""
    if len(fraction) > decimals:
        raise ValueError(f"{path}: {price} has more decimals than the token's {decimals}")
    amount = int(whole + fraction.ljust(decimals, "0"))  # exact: no float, no Decimal context
    if amount <= 0:
        raise ValueError(f"{path}: must be greater than zero")
    if amount > _UINT256_MAX:
        raise ValueError(f"{path}: {price} is more than the token can ever transfer")
    return amount


def _line(path: str, message: str) -> str:
    if message.startswith(".") and path:  # a model validator naming a key below the path
        return path + message
    return f"{path}: {message}" if path else message


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Validate an already-parsed TOML document."""
    context = {"base_dir": base_dir or Path("."), "env": os.environ if env is None else env}
    try:
        return Config.model_validate(data, context=context)
    except ValidationError as exc:
        lines = [_line(path, message) for path, message in problems(exc)]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a TOML config file."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return parse_config(data, base_dir=file.resolve().parent, env=env)
