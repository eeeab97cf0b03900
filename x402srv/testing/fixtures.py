"""pytest fixtures shared by the core's and the plugins' test suites.

Loaded from the repository's root ``conftest.py`` (``pytest_plugins``); a plugin
tested on its own can use ``-p x402srv.testing.fixtures``.

- ``devchain``: one anvil + our EIP-3009 token for the session, stopped by PID.
- ``facilitator_url``: a local facilitator process built from the official SDK.
- ``facilitator``: a factory for more facilitator processes (e.g. faulty ones).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from x402srv.devchain import Devchain
from x402srv.testing import launcher
from x402srv.testing.servers import _kill_group, free_port, wait_for_http

__all__ = ["FacilitatorProcess", "devchain", "facilitator", "facilitator_url"]

REPO = Path(__file__).resolve().parents[2]


class FacilitatorProcess:
    """``python -m x402srv.testing.facilitator_app`` on a free port, stopped by PID."""

    def __init__(
        self,
        chain: Devchain,
        key: str,
        log: Path,
        fault: str | None = None,
        *,
        port: int | None = None,
        delay: float = 3.0,
        record: bool = False,
        also: Sequence[Devchain] = (),
        gate: Path | None = None,
        address: str | None = None,
        receipt_poll: float | None = None,
    ) -> None:
        self.port = port or free_port()
        self.gate = gate
        self.address = address  # its signer: the sender of the transactions it broadcasts
        self.record = log.with_suffix(".requests.jsonl") if record else None
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            "--rpc-url",
            chain.rpc_url,
            "--network",
            chain.network,
            "--port",
            str(self.port),
        ]
        for other in also:  # more networks, one signer on each chain's RPC
            command += ["--chain", f"{other.network}={other.rpc_url}"]
        if fault:
            command += ["--fault", fault, "--delay", str(delay)]
        if gate is not None:
            command += ["--gate", str(gate)]
        if self.record is not None:
            command += ["--record", str(self.record)]
        if receipt_poll is not None:  # seconds between its receipt polls (the SDK's: 0.1)
            command += ["--receipt-poll", str(receipt_poll)]
        with log.open("ab") as out:  # (in a test session, forked from the warm zygote)
            self.process = launcher.popen(
                command,
                program="x402srv.testing.facilitator_app",
                cwd=os.getcwd(),
                env={**os.environ, "X402SRV_FACILITATOR_KEY": key},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for_http(f"{self.url}/supported", timeout=30, process=self.process)
        except Exception:
            self.stop()
            raise

    def received(self) -> list[str]:
        """Every POST body it was sent so far, as text (``record=True`` only)."""
        assert self.record is not None, "started without record=True"
        if not self.record.exists():
            return []
        return self.record.read_text("utf-8").splitlines()

    def stop(self) -> None:
        _kill_group(self.process)


@pytest.fixture(scope="session")
def devchain() -> Iterator[Devchain]:
    with Devchain.start(project_dir=REPO) as chain:
        yield chain


@pytest.fixture(scope="session")
def facilitator(
    devchain: Devchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., FacilitatorProcess]]:
    """``facilitator(fault=None, port=None, delay=3, record=False, also=(), gate=None)``.

    A process with its own signer; ``also`` are more chains it settles on (its
    signer gets gas there too), ``gate`` the directory of a ``settle-gate`` fault.
    """
    started: list[FacilitatorProcess] = []

    def start(
        fault: str | None = None,
        *,
        port: int | None = None,
        delay: float = 3.0,
        record: bool = False,
        also: Sequence[Devchain] = (),
        gate: Path | None = None,
    ) -> FacilitatorProcess:
        signer = devchain.new_account(eth=1000, usdc_atomic=0)
        for other in also:
            other.fund_eth(signer.address, 1000 * 10**18)
        key = "0x" + bytes(signer.key).hex()
        log = tmp_path_factory.mktemp("facilitator") / f"facilitator-{secrets.token_hex(4)}.log"
        process = FacilitatorProcess(
            devchain,
            key,
            log,
            fault,
            port=port,
            delay=delay,
            record=record,
            also=also,
            gate=gate,
            address=signer.address,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture(scope="session")
def facilitator_url(facilitator: Callable[..., FacilitatorProcess]) -> str:
    return facilitator().url
