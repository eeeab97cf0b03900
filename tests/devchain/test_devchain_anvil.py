"""anvil lifecycle: found where npm puts it, started directly, stopped by PID without leaks."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from tests.support.paths import REPO
from x402srv.devchain import (
    ANVIL_ENV_VAR,
    ANVIL_VERSION,
    AnvilNotFoundError,
    AnvilProcess,
    AnvilStartError,
    Devchain,
    RpcClient,
    anvil_cache_dir,
    ensure_anvil,
    find_anvil,
)


def assert_gone(pid: int) -> None:
    """The process was reaped: no zombie, no survivor."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not Path(f"/proc/{pid}").exists()


def test_find_anvil_from_a_subdirectory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ANVIL_ENV_VAR, raising=False)
    binary = find_anvil(Path(__file__).parent)
    assert binary.parts[-5:] == ("node_modules", "@foundry-rs", "anvil-linux-amd64", "bin", "anvil")


def test_find_anvil_explains_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing here depends on what the parents of the temp dir hold (issue 30: a stray
    /tmp/node_modules made it pass for the wrong reason, or fail): no parent is searched,
    and the per-user cache is an empty directory of the test's own."""
    monkeypatch.delenv(ANVIL_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AnvilNotFoundError, match="npm ci") as caught:
        find_anvil(tmp_path, parents=False)
    assert str(tmp_path / "cache" / "x402srv" / f"anvil-{ANVIL_VERSION}") in str(caught.value)


def test_anvil_installed_for_the_demo_is_found_in_the_per_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where ``ensure_anvil`` installs (``npm install --prefix <cache>``), never the cwd."""
    monkeypatch.delenv(ANVIL_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = anvil_cache_dir()
    assert cache == tmp_path / "cache" / "x402srv" / f"anvil-{ANVIL_VERSION}"
    installed = cache / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
    installed.parent.mkdir(parents=True)
    shutil.copy(find_anvil(REPO), installed)  # the real binary, where npm --prefix puts it
    work = tmp_path / "somewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert find_anvil(work, parents=False) == installed
    assert list(work.iterdir()) == []  # nothing was written where the demo ran
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert anvil_cache_dir() == Path.home() / ".cache" / "x402srv" / f"anvil-{ANVIL_VERSION}"


def test_env_var_overrides_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ANVIL_ENV_VAR, str(tmp_path / "missing-anvil"))
    with pytest.raises(AnvilNotFoundError, match=ANVIL_ENV_VAR):
        find_anvil()


def test_ensure_anvil_does_not_reinstall(monkeypatch: pytest.MonkeyPatch) -> None:
    """With node_modules present it must not run npm (no network in tests)."""
    monkeypatch.delenv(ANVIL_ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "")  # npm unreachable: calling it would fail the test
    assert ensure_anvil(REPO) == find_anvil(REPO)


def test_anvil_process_stops_by_pid() -> None:
    with AnvilProcess(find_anvil(), chain_id=4242) as anvil:
        pid = anvil.pid
        with RpcClient(anvil.url) as rpc:
            assert rpc.chain_id() == 4242
            assert rpc.block_number() == 0
    assert not anvil.running
    assert_gone(pid)
    anvil.stop()  # idempotent


def test_bad_flags_surface_anvil_stderr() -> None:
    anvil = AnvilProcess(find_anvil(), extra_args=["--no-such-flag"])
    with pytest.raises(AnvilStartError, match="no-such-flag"):
        anvil.start()
    assert not anvil.running


def test_taken_port_is_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        anvil = AnvilProcess(find_anvil(), port=sock.getsockname()[1])
        with pytest.raises(AnvilStartError, match="already in use"):
            anvil.start()


def test_devchain_stop_leaves_no_process() -> None:
    with Devchain.start(chain_id=1337) as chain:
        pid = chain.anvil.pid
        assert chain.network == "eip155:1337"
        assert chain.token.chain_id == 1337
        buyer = chain.new_account(eth=1, usdc_atomic=5)
        assert chain.balance_of(buyer.address) == 5
        assert chain.rpc.get_balance(buyer.address) == 10**18
    assert_gone(pid)


def test_increase_time(devchain: Devchain) -> None:
    before = devchain.block_timestamp()
    assert devchain.increase_time(30) >= before + 30
