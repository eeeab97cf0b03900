"""A real PostgreSQL cluster for tests: own directory, own port, stopped by its own ``pg_ctl``.

Shipped in the package, like ``x402srv.testing``, so the core's end-to-end
tests start the same clusters as the plugin's (pytest fixtures in
``x402srv_postgres.fixtures``). Never touches a PostgreSQL it did not start:
the machine may run its own on 5432.

The binaries come from ``$X402SRV_POSTGRES_BIN`` or the newest
``/usr/lib/postgresql/*/bin`` (or ``pg_config --bindir``). PostgreSQL refuses
to run as root, so as root every command runs as the ``postgres`` user (or
``nobody``) through ``runuser``, in a directory under the system's temp
directory that this user owns.

A cluster can stream to a standby (``standby``): ``pg_basebackup -R``, and
with ``synchronous=True`` the primary acknowledges a commit only once the
standby has it (``synchronous_standby_names``), which is what makes a
promotion lose nothing acknowledged.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import quote

from x402srv.testing.servers import free_port

__all__ = [
    "PostgresServer",
    "TlsFiles",
    "discard_template",
    "make_tls_files",
    "migrate_schema",
    "postgres_bin_dir",
]

USER = "x402srv"
DATABASE = "postgres"


def postgres_bin_dir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: the env override, the newest install, pg_config."""
    override = os.environ.get("X402SRV_POSTGRES_BIN")
    if override:
        return Path(override) if (Path(override) / "initdb").exists() else None
    installs = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if installs:
        return Path(installs[-1]).parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout
        if (Path(found.strip()) / "initdb").exists():
            return Path(found.strip())
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _run_as() -> str | None:
    """The user PostgreSQL runs as when we are root (it refuses root itself)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists")


def _owned_directory(prefix: str) -> Path:
    """A fresh directory the server's user owns (under /tmp: pytest's are root-only)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    user = _run_as()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


@dataclass(frozen=True)
class TlsFiles:
    """A throw-away CA, a server certificate for 127.0.0.1, and a client certificate for USER."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path | None = None) -> TlsFiles:
    """With ``openssl``, as an operator would, in a directory the server's user can read.

    Without ``directory`` it is a fresh one under the temp directory that the caller
    deletes (it holds private keys): the ``postgres_tls_files`` fixture does.
    """
    directory = directory or _owned_directory("x402srv-pg-tls-")
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
    )
    ca_key = directory / "ca.key"
    ext = directory / "server.ext"
    ext.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    _openssl("genrsa", "-out", ca_key, "2048")
    _openssl("req", "-x509", "-new", "-key", ca_key, "-days", "2", "-subj", "/CN=x402srv test CA",
             "-out", files.ca)  # fmt: skip
    for cert, key, subject, extra in (
        (files.server_cert, files.server_key, "/CN=127.0.0.1", ["-extfile", str(ext)]),
        (files.client_cert, files.client_key, f"/CN={USER}", []),
    ):
        csr = cert.with_suffix(".csr")
        _openssl("genrsa", "-out", key, "2048")
        _openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
        _openssl("x509", "-req", "-in", csr, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial",
                 "-days", "2", "-out", cert, *extra)  # fmt: skip
        key.chmod(0o600)
    user = _run_as()
    if user is not None:  # the server reads its key and the CA as its own user
        entry = pwd.getpwnam(user)
        for path in (directory, files.ca, files.server_cert, files.server_key):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return files


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@dataclass
class PostgresServer:
    """One cluster: ``initdb`` into its own directory, ``pg_ctl start`` on a free port.

    ``password`` turns on password (SCRAM) authentication over TCP; ``tls``
    turns on TLS and, with ``client_certificates``, requires a client
    certificate signed by the test CA instead of a password. ``settings`` are
    further ``postgresql.conf`` lines.
    """

    name: str = "primary"
    password: str | None = None
    tls: TlsFiles | None = None
    client_certificates: bool = False
    settings: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    base: Path = field(default_factory=lambda: _owned_directory("x402srv-pg-"))
    _password_pending: bool = field(default=False, repr=False)
    #: Standbys made by ``standby``: ``cleanup`` takes them along (a promoted one outlives
    #: the primary's crash, and nobody else holds it).
    _standbys: list[PostgresServer] = field(default_factory=list, repr=False)

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    def dsn(self, *, password: str | None = None, **params: str) -> str:
        """``postgresql://x402srv[:password]@127.0.0.1:<port>/postgres[?params]``."""
        secret = password if password is not None else self.password
        auth = f"{USER}:{quote(secret, safe='')}" if secret else USER
        query = "&".join(f"{key}={quote(value, safe='')}" for key, value in params.items())
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{DATABASE}" + (
            f"?{query}" if query else ""
        )

    # ------------------------------------------------------------ life cycle

    def init(self) -> Self:
        """A copy of the session's ``initdb`` template, then the tests' own settings."""
        _as_server_user(["cp", "-a", str(_template()), str(self.data)], cwd=self.base)
        self._configure()
        self._password_pending = bool(self.password)
        return self

    def _configure(self) -> None:
        """``postgresql.conf`` lines (the last of a key wins) and the whole ``pg_hba.conf``."""
        lines = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.base}'",
            "max_connections": "200",
            "cluster_name": f"'{self.name}'",
            "logging_collector": "off",
            "shared_buffers": "32MB",
        }
        method = "scram-sha-256" if self.password else "trust"
        hba = ["local all all trust", "local replication all trust"]
        if self.tls is None:
            hba += [f"host all all 127.0.0.1/32 {method}"]
            hba += [f"host replication all 127.0.0.1/32 {method}"]
        else:
            lines |= {
                "ssl": "on",
                "ssl_cert_file": f"'{self.tls.server_cert}'",
                "ssl_key_file": f"'{self.tls.server_key}'",
                "ssl_ca_file": f"'{self.tls.ca}'",
            }
            client = "cert" if self.client_certificates else method
            hba += [
                f"hostssl all {USER} 127.0.0.1/32 {client}",
                f"hostssl replication all 127.0.0.1/32 {method}",
                "hostnossl all all 127.0.0.1/32 reject",
            ]
        lines |= dict(self.settings)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# x402srv tests\n")
            conf.writelines(f"{key} = {value}\n" for key, value in lines.items())
        (self.data / "pg_hba.conf").write_text("\n".join(hba) + "\n")

    def start(self, timeout: float = 30.0) -> Self:
        """Start it (``initdb`` first if needed); a server already running stays as it is."""
        if self.pid is not None:
            return self
        if not (self.data / "PG_VERSION").exists():
            self.init()
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t",
                 str(int(timeout)), "start")  # fmt: skip
        if self._password_pending:  # over the socket, where local connections are trusted
            secret = (self.password or "").replace("'", "''")
            self.sql(f"ALTER ROLE {USER} PASSWORD '{secret}'")
            self._password_pending = False
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m fast``: sessions end at once, everything committed stays."""
        if self.pid is None:
            return
        try:
            self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")
        except subprocess.CalledProcessError:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the postmaster: a crash (the next start replays the WAL)."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)
        # Its backends notice the postmaster is gone and exit; wait for the port.
        while time.monotonic() < deadline and _port_busy(self.port):
            time.sleep(0.02)

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Stop it and its standbys, and delete their directories."""
        for standby in reversed(self._standbys):
            standby.cleanup()
        self.stop(mode="immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def pid(self) -> int | None:
        """The postmaster's PID from its pid file, if it runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    # ------------------------------------------------------------ replication

    def standby(self, name: str = "standby", *, synchronous: bool = True) -> PostgresServer:
        """A streaming standby of this (running) server, started; synchronous by default."""
        replica = PostgresServer(
            name=name,
            password=self.password,
            tls=self.tls,
            client_certificates=self.client_certificates,
            settings=self.settings,
        )
        self._standbys.append(replica)
        self._pg("pg_basebackup", "-D", str(replica.data), "-h", "127.0.0.1", "-p",
                 str(self.port), "-U", USER, "-R", "-X", "stream", "--no-sync",
                 env={"PGPASSWORD": self.password or ""})  # fmt: skip
        # The copy carries this server's settings; the replica's own port and name win.
        replica._configure()
        replica.start()
        if synchronous:
            self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
            self.sql("SELECT pg_reload_conf()")
            query = "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{}'"
            self.wait_for(query.format(name), "sync")
        return replica

    def promote(self) -> None:
        """``pg_ctl promote``: a standby becomes a primary that accepts writes."""
        self._pg("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "promote")

    # ------------------------------------------------------------ plumbing

    def sql(self, statement: str) -> str:
        """Run one statement with ``psql`` over the server's socket; its output, unaligned."""
        return self._pg("psql", "-h", str(self.base), "-p", str(self.port), "-U", USER,
                        "-d", DATABASE, "-XAtq", "-v", "ON_ERROR_STOP=1",
                        "-c", statement).strip()  # fmt: skip

    def wait_for(self, query: str, expected: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.sql(query)
            if seen == expected:
                return
            time.sleep(0.05)
        raise TimeoutError(f"{query!r} gave {seen!r}, not {expected!r}, within {timeout} s")

    def _pg(self, tool: str, *args: str, env: Mapping[str, str] | None = None) -> str:
        """One PostgreSQL program, as the server's user; raises with its output on failure."""
        try:
            return _run_tool(tool, *args, cwd=self.base, env=env)
        except subprocess.CalledProcessError as exc:
            log = (
                self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            )
            exc.stderr = f"{exc.stderr}\n{log}"
            raise

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _as_server_user(
    command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None
) -> str:
    """Run ``command`` as the user PostgreSQL runs as; raise with its output on failure."""
    user = _run_as()
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C", **(env or {})},
        cwd=cwd,
    )
    if result.returncode != 0:
        raise subprocess.CalledProcessError(
            result.returncode, command, result.stdout, result.stderr
        )
    return result.stdout


def _run_tool(tool: str, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL binaries not found (set X402SRV_POSTGRES_BIN)")
    return _as_server_user([str(bin_dir / tool), *args], cwd=cwd, env=env)


_templates: list[Path] = []


def discard_template() -> None:
    """Delete the ``initdb`` template now (the fixtures do at session end; atexit is late)."""
    while _templates:
        shutil.rmtree(_templates.pop().parent, ignore_errors=True)


def _template() -> Path:
    """One ``initdb`` per process, copied by every cluster (a copy takes a fraction of it)."""
    if not _templates:
        base = _owned_directory("x402srv-pg-template-")
        atexit.register(shutil.rmtree, base, True)
        _run_tool("initdb", "-D", str(base / "data"), "-U", USER, "-E", "UTF8", "--no-locale",
                  "--no-sync", "--auth=trust", cwd=base)  # fmt: skip
        _templates.append(base / "data")
    return _templates[0]


def migrate_schema(dsn: str, schema: str) -> list[str]:
    """``x402srv migrate`` for one schema, callable with or without a running event loop."""
    from x402srv.plugin import Secret

    from .options import PostgresOptions
    from .store import PostgresStore

    options = PostgresOptions(dsn=Secret(dsn), schema=schema)
    store = PostgresStore(options.dsn, options)
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # its own loop, whatever the caller's
        return thread.submit(asyncio.run, store.migrate()).result()


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet is not: a container's init may be slow to)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def _port_busy(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
