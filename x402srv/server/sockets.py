"""The listening sockets, bound by the main process before anything is served.

``bind_listeners`` opens the public socket (``server.host``/``server.port``)
and, when the console has a listener of its own, the admin one
(``admin.host``/``admin.port``), before the store is opened or a worker
starts. A socket that cannot be bound is a ``ConfigError`` naming its key:
``x402srv`` prints one line and exits 2, and nothing was served. The workers
inherit the bound sockets, so they never bind themselves.

    EADDRINUSE      <key>.port  "127.0.0.1:8402 is already in use"
    EACCES          <key>.port  "not allowed to listen on 0.0.0.0:80 (...)"
    EADDRNOTAVAIL   <key>.host  "10.9.9.9 is not an address of this machine"
    cannot resolve  <key>.host  "cannot resolve 'no-such-host'"
"""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass
from ipaddress import ip_address

from x402srv.config.models import Config
from x402srv.errors import ConfigError

__all__ = ["BACKLOG", "Listeners", "bind_listeners", "shown_address"]

#: Connections the kernel queues for accept (Sanic's own default).
BACKLOG = 100


@dataclass(frozen=True)
class Listeners:
    """The bound sockets: the public one, and the console's own when it has one."""

    public: socket.socket
    admin: socket.socket | None = None

    def close(self) -> None:
        self.public.close()
        if self.admin is not None:
            self.admin.close()


def bind_listeners(config: Config) -> Listeners:
    """Bind every listener ``config`` asks for, or raise ``ConfigError`` naming the key."""
    server = config.server
    public = bind(server.host, server.port, section="server")
    admin = config.admin
    if admin is None or not admin.enabled or not admin.own_listener:
        return Listeners(public)
    assert admin.port is not None
    try:
        return Listeners(public, bind(admin.listen_host, admin.port, section="admin"))
    except ConfigError:
        public.close()
        raise


def shown_address(host: str, port: int) -> str:
    """``127.0.0.1:8402``, ``[::1]:8402``: how messages name a listening address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(host: str, port: int, *, section: str) -> socket.socket:
    """A listening, inheritable TCP socket on ``host:port``; errors name ``section``'s keys."""
    where = shown_address(host, port)
    try:
        family, address = _address(host, port)
    except (socket.gaierror, UnicodeError):
        raise ConfigError(f"cannot resolve {host!r}", path=f"{section}.host") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restart must not wait for the last run's connections in TIME_WAIT; a
        # socket that still listens there keeps the port (Linux needs SO_REUSEPORT
        # to share it, which is never set).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise _bind_error(exc, where, host, port, section) from None
    sock.set_inheritable(True)
    return sock


def _address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    with contextlib.suppress(ValueError):
        ip = ip_address(host)
        return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), (str(ip), port)
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, (str(address[0]), port)


def _bind_error(exc: OSError, where: str, host: str, port: int, section: str) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"{where} is already in use", path=f"{section}.port")
    if exc.errno == errno.EACCES:
        why = " (a port below 1024 needs privileges)" if port < 1024 else ""
        return ConfigError(f"not allowed to listen on {where}{why}", path=f"{section}.port")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"{host} is not an address of this machine", path=f"{section}.host")
    return ConfigError(f"cannot listen on {where}: {exc.strerror}", path=f"{section}.port")
