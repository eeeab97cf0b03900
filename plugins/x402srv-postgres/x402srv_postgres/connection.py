"""The asyncpg pool, TLS, and the boundary where database errors become ``StoreUnavailable``.

One pool per worker process. It opens connections lazily (``min_size = 0``),
so a server that is down when a worker starts costs a warning, not the start;
a connection that died with its server (a restart, a failover) is dropped when
it is handed back and a fresh one is opened for the next request, so service
resumes by itself. Every connection gets ``application_name = x402srv`` and the
configured ``statement_timeout``; asyncpg prepares each statement once per
connection and reuses it (its statement cache).

Nothing that reaches a client or a log line holds the DSN's password: logs get
``describe_dsn`` (scheme and hosts) and ``describe`` (the exception's type and,
for an error the server sent, its SQLSTATE and first words, which never echo
credentials).
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any, Literal

import asyncpg
from asyncpg import exceptions as pg

from x402srv.plugin import ConfigError, StoreUnavailable

from .options import PostgresOptions

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    #: A connection of the pool, or one of its own (``migrate``).
    Conn = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]

__all__ = [
    "RETRY_AFTER",
    "UNAVAILABLE",
    "ConfigProblem",
    "Conn",
    "describe",
    "describe_dsn",
    "is_config_problem",
    "pool_arguments",
    "unavailable",
]

log = logging.getLogger("x402srv_postgres")

#: Seconds a client is told to wait: a restart or a failover takes a few.
RETRY_AFTER = 2
UNAVAILABLE = "The store could not be reached; retry later."

#: Errors that no retry fixes: the seller's config (credentials, database name, TLS files).
ConfigProblem = (
    pg.InvalidPasswordError,
    pg.InvalidAuthorizationSpecificationError,
    pg.InvalidCatalogNameError,
    pg.InsufficientPrivilegeError,
    pg.ClientConfigurationError,
)

#: What the pool raises when the database cannot serve: converted to 503 at the boundary.
#: (``InternalClientError``: a connection the server dropped mid-protocol, e.g. while the
#: event loop was blocked, is left in a state asyncpg refuses to go on from.)
DatabaseErrors = (
    pg.PostgresError,
    pg.InterfaceError,
    pg.InternalClientError,
    OSError,
    TimeoutError,
)


def is_config_problem(exc: BaseException) -> bool:
    """Credentials, database name, privileges, or a server certificate that fails the check."""
    return isinstance(exc, (*ConfigProblem, ssl.SSLCertVerificationError))


def describe_dsn(dsn: str) -> str:
    """``scheme://host:port[,host:port]``: no user, password, database or parameters."""
    scheme, _, rest = dsn.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    hosts = netloc.rpartition("@")[2] or "localhost"
    return f"{scheme}://{hosts}"


def describe(exc: BaseException) -> str:
    """The exception's type; for an error the server sent, its SQLSTATE and first words."""
    if isinstance(exc, pg.PostgresError) and getattr(exc, "sqlstate", None):
        message = str(exc).splitlines()[0][:160] if str(exc) else ""
        return f"{type(exc).__name__} [{exc.sqlstate}]: {message}"
    return type(exc).__name__


def unavailable(op: str, dsn: str, exc: BaseException) -> StoreUnavailable:
    """Log why (without secrets) and make the 503 a request answers with."""
    log.error("postgres store %s: %s failed: %s", describe_dsn(dsn), op, describe(exc))
    error = StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
    error.__suppress_context__ = True
    return error


def tls_context(
    options: PostgresOptions,
) -> ssl.SSLContext | Literal["disable", "allow", "prefer"] | None:
    """What asyncpg's ``ssl`` argument gets: a context for the modes that use files or checks.

    ``require`` encrypts without checking the certificate (as libpq; with a
    root certificate given it checks it, as libpq does too); ``verify-ca``
    checks the chain; ``verify-full`` also the host name. ``None`` leaves TLS
    to the DSN's own ``sslmode`` parameter.
    """
    mode = options.sslmode
    if mode is None or mode == "disable" or mode == "allow" or mode == "prefer":
        return mode
    if mode == "require" and options.sslrootcert is not None:
        mode = "verify-ca"
    try:
        cafile = str(options.sslrootcert) if options.sslrootcert else None
        context = ssl.create_default_context(cafile=cafile)
        if mode == "require":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif mode == "verify-ca":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_REQUIRED
        if options.sslcert is not None and options.sslkey is not None:
            context.load_cert_chain(str(options.sslcert), str(options.sslkey))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"the TLS files could not be loaded: {type(exc).__name__}: {exc}",
            path="store.postgres",
        ) from None
    return context


def pool_arguments(options: PostgresOptions) -> dict[str, Any]:
    """Keyword arguments of ``asyncpg.create_pool`` (the DSN aside)."""
    settings = {
        "application_name": "x402srv",
        "statement_timeout": str(options.statement_timeout_ms),
        # A connection never sits in an open transaction; if it ever did, end it.
        "idle_in_transaction_session_timeout": str(options.statement_timeout_ms * 2),
    }
    if options.synchronous_commit is not None:
        settings["synchronous_commit"] = options.synchronous_commit
    return {
        "min_size": 0,
        "max_size": options.pool_size,
        "timeout": options.connect_timeout_seconds,
        # The server cancels first; this is for a server that does not answer at all.
        "command_timeout": options.statement_timeout_ms / 1000 + 1,
        "max_inactive_connection_lifetime": 60.0,
        "ssl": tls_context(options),
        "server_settings": settings,
    }


def create_pool(dsn: str, options: PostgresOptions) -> asyncpg.Pool:
    """A pool that has not connected yet (``await pool`` is not needed with ``min_size = 0``)."""
    return asyncpg.create_pool(dsn, **pool_arguments(options))
