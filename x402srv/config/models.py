"""The seller's TOML, validated into pydantic models (docs/protocol/config.md).

Unknown keys are errors, and every error names its key path
(``plans[1].unit_amount: ...``). Secrets are a string or ``{env = "NAME"}`` /
``{file = "path"}`` and become ``Secret`` objects whose ``repr`` and
serialisation never show the value. Prices are turned into each token's atomic
units here, once, with that token's decimals: a price that does not convert
exactly is an error, never rounded.

Where the seller is paid (one network, or ``[[networks]]``) is resolved by
``x402srv.config.networks``; a plan's options are every (network, token) it accepts.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from x402srv.config.console import AdminConfig, CountersConfig, RevocationConfig
from x402srv.config.discovery import DiscoveryConfig
from x402srv.config.fields import StrictModel, checksum_address, http_url
from x402srv.config.ignored_keys import check_ignored_keys
from x402srv.config.mcp import McpConfig, check_mcp, per_call_plan_id
from x402srv.config.networks import (
    Network,
    NetworkConfig,
    NetworkEntry,
    SettlerConfig,
    SettlerSpec,
    TokenConfig,
    network_name,
    resolve_entries,
    resolve_single,
)
from x402srv.config.offer_receipt import OfferReceiptConfig
from x402srv.config.plans import CALLS_TOKEN_TTL_SECONDS, parse_rate_limit
from x402srv.config.plugin_tables import (
    BreakerConfig,
    CredentialsConfig,
    PreviousKey,
    SettlementConfig,
    StoreConfig,
)
from x402srv.config.problems import problems
from x402srv.config.refunds import RefundsConfig
from x402srv.config.routes import RouteConfig, check_routes
from x402srv.config.secrets import (
    Secret,
    redact_url,
    validation_context,
)
from x402srv.config.siwx import SiwxConfig
from x402srv.errors import ConfigError
from x402srv.interfaces import RateWindow
from x402srv.wire.networks import KNOWN_NETWORKS, NetworkInfo

__all__ = [
    "AdminConfig",
    "BreakerConfig",
    "Config",
    "CountersConfig",
    "CredentialsConfig",
    "MetricsConfig",
    "Network",
    "NetworkConfig",
    "NetworkEntry",
    "Plan",
    "PlanConfig",
    "PlanOption",
    "PreviousKey",
    "RateLimitConfig",
    "ReconcilerConfig",
    "RevocationConfig",
    "Secret",
    "SellerConfig",
    "ServerConfig",
    "SettlementConfig",
    "SettlerConfig",
    "SettlerSpec",
    "StoreConfig",
    "TokenConfig",
    "load_config",
    "parse_config",
    "redact_url",
]


#: A per-call plan's token: good for the one call (and its retry after a failed tool).
PER_CALL_TOKEN_TTL_SECONDS = 3600
_PLAN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_PRICE = re.compile(r"\$([0-9]+)(?:\.([0-9]+))?")
_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")


_Model = StrictModel


class SellerConfig(_Model):
    agent_name: str = Field(min_length=1)
    agent_description: str = Field(min_length=1)
    agent_url: str
    provider_name: str = Field(min_length=1)
    provider_url: str
    wallet_address: str
    network: str | None = None  # the one-network form; else [[networks]]
    agent_version: str = "1.0.0"

    @field_validator("agent_url")
    @classmethod
    def _agent_url(cls, value: str) -> str:
        return http_url(value, trailing_slash=False)

    @field_validator("provider_url")
    @classmethod
    def _provider_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("wallet_address")
    @classmethod
    def _wallet(cls, value: str) -> str:
        return checksum_address(value)

    @field_validator("network")
    @classmethod
    def _network(cls, value: str | None) -> str | None:
        return None if value is None else network_name(value)


class PlanConfig(_Model):
    plan_id: str
    unit_amount: str
    description: str = Field(min_length=1)
    token_ttl_seconds: int = Field(default=3600, gt=0)
    #: Only these networks (names or eip155:<id>); default: every configured network.
    networks: list[str] | None = Field(default=None, min_length=1, max_length=64)
    # Selling calls (x402srv/config/plans.py): credits per grant, a rate limit per grant.
    calls: int | None = Field(default=None, gt=0, le=10**12)
    rate_limit: str | None = None
    #: What facilitators list (the bazaar extension): x402srv/config/discovery.py.
    discovery: DiscoveryConfig | None = None

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


class ReconcilerConfig(_Model):
    """``[reconciler]``: the background task that finishes what requests left behind."""

    enabled: bool = True
    interval_seconds: float = Field(default=30.0, ge=1, le=3600)
    grace_seconds: float = Field(default=60.0, ge=0, le=86_400)
    retention_days: float = Field(default=30.0, gt=0, le=3650)
    # Never-paid records (expired, cancelled; a stale PENDING one expires first) and unpaid
    # A2A tasks.
    unpaid_retention_hours: float = Field(default=6.0, gt=0, le=87_600)
    batch_size: int = Field(default=200, ge=1, le=10_000)


#: An HTTP field name (RFC 9110 ``token``).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class RateLimitConfig(_Model):
    """``[rate_limit]``: unpaid requests (discovery, challenges, A2A) per client and window.

    A payment that verifies is never limited; one that fails counts as unpaid.
    The client is the peer address, or behind proxies the ``trusted_hops``-th
    address from the right of ``client_ip_header`` (``x402srv.usage.unpaid_limit``): the
    two come together, since the first entries of such a header are whatever
    the client sent, and only the number of proxies says which entry one of
    them wrote.
    """

    enabled: bool = True
    unpaid_requests: int = Field(default=600, ge=1, le=100_000_000)
    window_seconds: float = Field(default=60.0, ge=1, le=86_400)
    client_ip_header: str | None = Field(default=None, min_length=1, max_length=64)
    trusted_hops: int | None = Field(default=None, ge=1, le=16, strict=True, validate_default=True)

    @field_validator("client_ip_header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not _HEADER_NAME.fullmatch(value):
            raise ValueError('must be an HTTP header name, like "X-Forwarded-For"')
        return value

    @field_validator("trusted_hops")
    @classmethod
    def _hops(cls, value: int | None, info: ValidationInfo) -> int | None:
        if "client_ip_header" not in info.data:
            return value  # client_ip_header itself was refused: that error says why
        header = info.data["client_ip_header"]
        if value is None and header is not None:
            raise ValueError(
                f"required with client_ip_header: how many proxies in front of x402srv "
                f"write {header} (1 behind one nginx or load balancer); the client is the "
                "address that many entries from the right, never the first one, which the "
                "client can write itself"
            )
        if value is not None and header is None:
            raise ValueError(
                "only with client_ip_header (the header the proxies write); without it "
                "the peer address counts"
            )
        return value

    def client_rule(self) -> str:
        """Who counts as one client, in words (``x402srv check`` shows it)."""
        if self.client_ip_header is None or self.trusted_hops is None:
            return "the peer address (IPv6: its /64)"
        nth = {1: "right-most", 2: "2nd from the right", 3: "3rd from the right"}.get(
            self.trusted_hops, f"{self.trusted_hops}th from the right"
        )
        return (
            f"the {nth} address of {self.client_ip_header} (IPv6: its /64); "
            "the peer address when it has fewer entries"
        )


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


@dataclass(frozen=True, slots=True)
class PlanOption:
    """One way to pay for a plan: a (network, token) and the price in that token's units."""

    network: NetworkInfo
    amount: int


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan with its price in atomic units of every token it accepts (``options``).

    ``amount`` is the first option's, as in the one-network form.
    """

    plan_id: str
    unit_amount: str
    description: str
    token_ttl_seconds: int
    amount: int
    options: tuple[PlanOption, ...] = ()
    calls: int | None = None  # credits a purchase adds (x402srv/config/plans.py)
    rate: RateWindow | None = None  # calls per grant and window

    @property
    def metered(self) -> bool:
        """Whether calls under this plan go through the store (credits or a rate limit)."""
        return self.calls is not None or self.rate is not None


class PaymentIdentifierConfig(StrictModel):
    """``[payment_identifier]``: ``required = true`` refuses payments without an id (400)."""

    required: bool = False


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
    networks: list[NetworkEntry] = Field(default_factory=list, max_length=64)
    routes: list[RouteConfig] = []  # gateway mode: x402srv/config/routes.py
    mcp: list[McpConfig] = []  # MCP tools sold: x402srv/config/mcp.py
    admin: AdminConfig | None = None  # the seller's console: x402srv/config/console.py
    revocation: RevocationConfig = RevocationConfig()
    analytics: CountersConfig = CountersConfig()  # the TOML key stays [analytics]
    refunds: RefundsConfig = RefundsConfig()
    #: Signed offers and receipts (x402srv/config/offer_receipt.py).
    offer_receipt: OfferReceiptConfig | None = None
    #: Buyers' idempotency keys (x402srv/access/payment_ids.py): always declared.
    payment_identifier: PaymentIdentifierConfig = PaymentIdentifierConfig()
    #: Sign-in-with-x (x402srv/config/siwx.py): declared in every 402 unless disabled.
    siwx: SiwxConfig = SiwxConfig()

    _networks: tuple[Network, ...] = PrivateAttr()
    _options: dict[tuple[str, str], NetworkInfo] = PrivateAttr()
    _plans: dict[str, Plan] = PrivateAttr()
    _base_dir: Path = PrivateAttr(default=Path("."))
    _env: Mapping[str, str] = PrivateAttr(default_factory=lambda: os.environ)

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Config:
        self._base_dir, self._env = validation_context(info)
        self._networks = self._resolve_networks()
        self._options = {
            (option.caip2, option.asset.lower()): option
            for network in self._networks
            for option in network.options
        }
        self._plans = self._resolve_plans()
        check_routes(self.routes, self._plans, self.credentials.issuer)
        check_mcp(self.mcp, self._plans, self.credentials.issuer, self._taken_paths())
        self._plans.update(self._per_call_plans())
        check_ignored_keys(
            store=self.store,
            settlement=self.settlement,
            credentials=self.credentials,
            networks=self._networks,
            network=self.network,
            admin=self.admin,
        )
        self._check_admin()
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

    def _taken_paths(self) -> dict[str, str]:
        """The paths x402srv answers besides ``[[mcp]]``: an MCP path must overlap none."""
        return {
            f"{self.server.base_path}/x402/access": "the access endpoint",
            f"{self.server.base_path}{self.server.a2a_path}": "the A2A endpoint",
            self.metrics.path: "the metrics path",
            "/.well-known": "the well-known documents",
            **{route.prefix: "a gateway route" for route in self.routes},
        }

    def _per_call_plans(self) -> dict[str, Plan]:
        """One plan of one call per priced MCP tool (x402srv/config/mcp.py)."""
        plans: dict[str, Plan] = {}
        for index, server in enumerate(self.mcp):
            for tool, price in server.priced_tools().items():
                path = f"mcp[{index}].tools.{tool}.price"
                plan_id = per_call_plan_id(tool)
                if plan_id in self._plans or plan_id in plans:
                    raise ValueError(
                        f"{path}: the tool's per-call plan {plan_id!r} already exists "
                        "(a plan of that id, or the same tool priced on another [[mcp]] path)"
                    )
                options = tuple(
                    PlanOption(option, _atomic_amount(price, option, path))
                    for network in self._networks
                    for option in network.options
                )
                plans[plan_id] = Plan(
                    plan_id=plan_id,
                    unit_amount=price,
                    description=f"One call of the MCP tool {tool!r}",
                    token_ttl_seconds=PER_CALL_TOKEN_TTL_SECONDS,
                    amount=options[0].amount,
                    options=options,
                    calls=1,
                )
        return plans

    def _check_admin(self) -> None:
        """The console's credentials are its own, and its paths are no one else's."""
        admin = self.admin
        if admin is None or not admin.enabled:
            return
        buyers = self.credentials.secret
        for key in ("token", "jwt_secret"):
            value = getattr(admin, key)
            if value is not None and buyers is not None and value == buyers:
                raise ValueError(
                    f"admin.{key}: must not be credentials.secret (buyers' tokens are signed "
                    "with it; the console needs a credential of its own)"
                )
        if admin.port is not None and admin.port == self.server.port:
            raise ValueError("admin.port: must differ from server.port (or leave it out)")
        if admin.own_listener:
            return
        taken = {
            f"{self.server.base_path}/x402/access": "the access endpoint",
            f"{self.server.base_path}{self.server.a2a_path}": "the A2A endpoint",
            self.metrics.path: "the metrics path",
            **{route.prefix: "a gateway route" for route in self.routes},
            **{server.path: "an [[mcp]] path" for server in self.mcp},
        }
        for path, what in taken.items():
            if (
                path == admin.prefix
                or path.startswith(admin.prefix + "/")
                or (admin.prefix.startswith(path + "/"))
            ):
                raise ValueError(f"admin.prefix: {admin.prefix} overlaps {what} ({path})")

    def _resolve_networks(self) -> tuple[Network, ...]:
        settlement = self.settlement
        if not self.networks:
            if self.seller.network is None:
                raise ValueError(
                    "seller.network: required (or declare the networks as [[networks]] tables)"
                )
            override = settlement.rpc_url.reveal() if settlement.rpc_url else None
            network = resolve_single(
                self.seller.network,
                self.network,
                rpc_override=override,
                settler=settlement.as_settler(),
            )
            return (network,)
        for key, given in (
            ("seller.network", self.seller.network is not None),
            ("network", self.network is not None),
            ("settlement.rpc_url", settlement.rpc_url is not None),
        ):
            if given:
                raise ValueError(
                    f"{key}: not with [[networks]] (each network table holds its own "
                    "network, tokens and rpc_url)"
                )
        return resolve_entries(self.networks, default_settler=settlement.as_settler())

    def _plan_networks(self, path: str, names: list[str] | None) -> tuple[Network, ...]:
        if names is None:
            return self._networks
        chosen: list[Network] = []
        for n, given in enumerate(names):
            try:
                name = network_name(given)
            except ValueError as exc:
                raise ValueError(f"{path}.networks[{n}]: {exc}") from None
            caip2 = KNOWN_NETWORKS[name].caip2 if name in KNOWN_NETWORKS else name
            found = [x for x in self._networks if name in (x.name, x.caip2) or x.caip2 == caip2]
            if not found:
                raise ValueError(f"{path}.networks[{n}]: {given!r} is not a configured network")
            chosen.extend(x for x in found if x not in chosen)
        return tuple(x for x in self._networks if x in chosen)  # in the config's order

    def _resolve_plans(self) -> dict[str, Plan]:
        plans: dict[str, Plan] = {}
        for index, plan in enumerate(self.plans):
            path = f"plans[{index}]"
            if plan.plan_id in plans:
                raise ValueError(f"{path}.plan_id: duplicate plan id {plan.plan_id!r}")
            options = tuple(
                PlanOption(option, _atomic_amount(plan.unit_amount, option, f"{path}.unit_amount"))
                for network in self._plan_networks(path, plan.networks)
                for option in network.options
            )
            plans[plan.plan_id] = Plan(
                plan_id=plan.plan_id,
                unit_amount=plan.unit_amount,
                description=plan.description,
                token_ttl_seconds=plan.token_ttl_seconds,
                amount=options[0].amount,
                options=options,
                calls=plan.calls,
                rate=parse_rate_limit(plan.rate_limit) if plan.rate_limit else None,
            )
        return plans

    @property
    def network_info(self) -> NetworkInfo:
        """The first network's first token: THE network of the one-network form."""
        return self._networks[0].options[0]

    @property
    def resolved_networks(self) -> tuple[Network, ...]:
        """Every network the seller is paid on, in the config's order."""
        return self._networks

    def option(self, network: str, asset: str) -> NetworkInfo | None:
        """The payment option of ``asset`` (any letter case) on the CAIP-2 ``network``."""
        return self._options.get((network, asset.lower()))

    @property
    def plan_map(self) -> dict[str, Plan]:
        return self._plans

    @property
    def seller_plan_ids(self) -> tuple[str, ...]:
        """The ``[[plans]]`` ids, without the per-call plans of priced MCP tools."""
        return tuple(plan.plan_id for plan in self.plans)

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
        data = self.model_dump(mode="json")  # secrets and plugin tables come out redacted
        info = self.network_info
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
            "networks": [_describe_network(network) for network in self._networks],
            "access_url": self.access_url,
            "plans": {p.plan_id: _describe_plan(p) for p in self._plans.values()},
            "rate_limit_client": self.rate_limit.client_rule(),
        }
        if self.mcp:  # what each tool costs, the unlisted ones included
            data["resolved"]["mcp"] = {
                server.path: {
                    "tools": {name: tool.describe() for name, tool in server.tools.items()},
                    "unlisted_tools": server.unlisted_tools.describe(),
                }
                for server in self.mcp
            }
        return data


def _describe_network(network: Network) -> dict[str, Any]:
    return {
        "name": network.name,
        "caip2": network.caip2,
        "chain_id": network.chain_id,
        "rpc_url": redact_url(network.rpc_url) if network.rpc_url else None,
        "tokens": [
            {
                "asset": token.asset,
                "eip712": {"name": token.name, "version": token.version},
                "decimals": token.decimals,
            }
            for token in network.tokens
        ],
        "settlers": [_describe_settler(spec) for spec in network.settlers],
    }


def _describe_settler(spec: SettlerSpec) -> dict[str, Any]:
    """A settler as ``check`` shows it: its label (URL redacted) and where its secrets live."""
    config = spec.config
    shown: dict[str, Any] = {"settler": spec.label, "strategy": spec.strategy, "from": spec.path}
    for key in ("facilitator_auth", "gas_wallet_private_key"):
        secret = getattr(config, key)
        if secret is not None:
            shown[key] = secret.describe()
    return shown


def _describe_plan(plan: Plan) -> dict[str, Any]:
    described: dict[str, Any] = {"amount": str(plan.amount)}
    if len(plan.options) > 1:
        described["options"] = [
            {"network": o.network.caip2, "asset": o.network.asset, "amount": str(o.amount)}
            for o in plan.options
        ]
    return described


_UINT256_MAX = 2**256 - 1


def _atomic_amount(price: str, option: NetworkInfo, path: str) -> int:
    """``price`` in ``option``'s token units, exactly; a price that needs rounding is an error."""
    match = _PRICE.fullmatch(price)
    assert match is not None  # checked by PlanConfig
    whole, fraction = match.group(1), match.group(2) or ""
    decimals = option.decimals
    if len(fraction) > decimals:  # no more decimals than the token (docs/protocol/config.md)
        raise ValueError(
            f"{path}: {price} has more decimals than the token's {decimals} "
            f"({option.asset} on {option.caip2}); it would have to be rounded"
        )
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
        found = problems(exc, config=True, model=Config)
        lines = [_line(path, message) for path, message in found]
        if len(lines) == 1:  # one line on the terminal: `x402srv check` prints it as is
            raise ConfigError(f"invalid configuration: {lines[0]}") from None
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
