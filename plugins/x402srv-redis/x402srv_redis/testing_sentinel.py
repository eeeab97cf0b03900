"""A real Sentinel set-up for tests: a primary, its replicas and Sentinels, each its own process.

Every process listens on a free 127.0.0.1 port, keeps its files in its own
directory and is stopped by PID. Sentinel's timeouts are tuned down (a second
to call a node down, a few to give up on a failover), and nothing waits on a
timer: each step polls for the state it needs, with a generous deadline,
because Sentinel acts on its own clock (it looks at the replicas every 10 s,
and turns a demoted primary that is still running into a replica ~10 s after a
failover). Helpers are synchronous: call them through ``asyncio.to_thread``
from a test whose event loop must keep running.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote

import redis

from x402srv.testing.servers import free_port

from .testing import RedisServer, redis_server_binary

__all__ = ["SentinelGroup", "poll"]

T = TypeVar("T")


def poll(what: str, probe: Callable[[], T | None], deadline: float = 60.0) -> T:
    """``probe()``'s first truthy answer; Redis errors meanwhile count as "not yet"."""
    end = time.monotonic() + deadline
    last: BaseException | None = None
    while time.monotonic() < end:
        try:
            value = probe()
        except (redis.RedisError, OSError) as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what}: not reached in {deadline:g} s (last error: {last!r})")


@dataclass
class SentinelGroup:
    """``replicas`` replicas of one primary, watched by ``sentinels`` Sentinels.

    Every data node has the same ``password`` (``requirepass`` and
    ``masterauth``, as a node may change roles), AOF with ``appendfsync``, and
    starts full syncs at once (``repl-diskless-sync-delay 0``). Sentinels
    protect themselves with ``sentinel_password`` when it is given.
    """

    directory: Path
    replicas: int = 1
    sentinels: int = 1
    service: str = "x402srv"
    password: str | None = None
    sentinel_password: str | None = None
    appendfsync: str = "always"
    nodes: list[RedisServer] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    _sentinel_processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # ------------------------------------------------------------ addresses

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        query = (
            f"?sentinel_password={quote(self.sentinel_password)}" if self.sentinel_password else ""
        )
        return f"redis+sentinel://{auth}{hosts}/{self.service}/0{query}"

    def node(self, port: int) -> redis.Redis:
        """A plain client of one data node (close it after use)."""
        return redis.Redis(port=port, password=self.password, decode_responses=True)

    def sentinel(self, index: int = 0) -> redis.Redis:
        return redis.Redis(
            port=self.sentinel_ports[index], password=self.sentinel_password, decode_responses=True
        )

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel sees it."""
        with self.sentinel() as client:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        return int(port)

    def role(self, port: int) -> dict[str, Any]:
        with self.node(port) as client:
            info: dict[str, Any] = client.info("replication")
        return info

    # ------------------------------------------------------------ life cycle

    def start(self) -> Self:
        primary = self._node("primary")
        for index in range(self.replicas):
            self._node(f"replica{index}", replica_of=primary.port)
        poll("replicas in sync", self._replicas_in_sync)
        for index in range(self.sentinels):
            self._start_sentinel(index, primary.port)
        poll("Sentinels see every replica", self._sentinels_see_replicas)
        return self

    def stop(self) -> None:
        for process in self._sentinel_processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self._sentinel_processes.clear()
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ failover

    def failover(self) -> int:
        """``SENTINEL FAILOVER``; returns the old primary's port once a replica took over.

        A replica Sentinel has not looked at recently is refused (NOGOODSLAVE):
        asked again until it is accepted.
        """
        old = self.primary_port()

        def accepted() -> bool:
            with self.sentinel() as client:
                try:
                    return bool(client.execute_command("SENTINEL", "FAILOVER", self.service))
                except redis.ResponseError as exc:
                    if "NOGOODSLAVE" in str(exc) or "INPROG" in str(exc):
                        return False
                    raise

        poll("Sentinel accepts the failover", accepted)
        poll("a replica took over", lambda: self.primary_port() != old)
        return old

    def settled(self, old: int) -> int:
        """Wait until the old primary follows the new one, in sync; the new primary's port."""
        new = self.primary_port()

        def following() -> bool:
            info = self.role(old)
            return (
                info.get("role") == "slave"
                and int(info.get("master_port", 0)) == new
                and info.get("master_link_status") == "up"
            )

        poll("the old primary follows the new one", following)
        return new

    # ------------------------------------------------------------ parts

    def _node(self, name: str, replica_of: int | None = None) -> RedisServer:
        directives = ["--repl-diskless-sync-delay", "0"]
        if self.password:
            directives += ["--masterauth", self.password]
        if replica_of is not None:
            directives += ["--replicaof", "127.0.0.1", str(replica_of)]
        node = RedisServer(
            self.directory / name,
            password=self.password,
            appendonly=True,
            appendfsync=self.appendfsync,
            directives=tuple(directives),
        )
        self.nodes.append(node)
        return node.start()

    def _replicas_in_sync(self) -> bool:
        return all(
            self.role(node.port).get("master_link_status") == "up" for node in self.nodes[1:]
        )

    def _start_sentinel(self, index: int, primary: int) -> None:
        directory = self.directory / f"sentinel{index}"
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {directory}",
            f"logfile {directory / 'sentinel.log'}",
            f"sentinel monitor {self.service} 127.0.0.1 {primary} {self.sentinels // 2 + 1}",
            f"sentinel down-after-milliseconds {self.service} 1000",
            f"sentinel failover-timeout {self.service} 5000",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {self.service} {self.password}")
        if self.sentinel_password:
            lines += [f"requirepass {self.sentinel_password}",
                      f"sentinel sentinel-pass {self.sentinel_password}"]  # fmt: skip
        config = directory / "sentinel.conf"  # Sentinel rewrites it: one file each
        config.write_text("\n".join(lines) + "\n")
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server not found (install it or set X402SRV_REDIS_SERVER)")
        self.sentinel_ports.append(port)
        self._sentinel_processes.append(
            subprocess.Popen(
                [binary, str(config), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        poll("Sentinel answers", lambda: self._sentinel_answers(index), deadline=10)

    def _sentinels_see_replicas(self) -> bool:
        for index in range(len(self.sentinel_ports)):
            with self.sentinel(index) as client:
                seen = client.sentinel_slaves(self.service)
            healthy = [r for r in seen if r.get("master-link-status") == "ok"
                       and not r.get("is_disconnected") and not r.get("is_sdown")]  # fmt: skip
            if len(healthy) < self.replicas:
                return False
        return True

    def _sentinel_answers(self, index: int) -> bool:
        with self.sentinel(index) as client:
            return bool(client.ping())
