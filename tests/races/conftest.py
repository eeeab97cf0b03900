"""Fixtures for the in-process race tests: a pipeline per test, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.rig import MakeRig, Rig, open_rig
from x402srv.devchain import Devchain, deploy_batch_settle


@pytest.fixture
def store_backend() -> str:
    """The store under the RacingStore; a module may parametrize it (memory, sqlite)."""
    return "memory"


@pytest.fixture
async def make_rig(
    devchain: Devchain, tmp_path: Path, store_backend: str
) -> AsyncIterator[MakeRig]:
    """``await make_rig(**open_rig options)``: a pipeline on the session's anvil."""
    async with AsyncExitStack() as stack:

        async def make(**options: Any) -> Rig:
            options.setdefault("store", store_backend)
            return await stack.enter_async_context(open_rig(devchain, tmp_path, **options))

        yield make


@pytest.fixture(scope="session")
def batch_settle(devchain: Devchain) -> str:
    """A BatchSettle contract on the session's anvil: many authorizations, one transaction."""
    return deploy_batch_settle(devchain.rpc, devchain.deployer)


@pytest.fixture
def own_chain() -> Iterator[Devchain]:
    """An anvil of the test's own: it moves chain time ahead of the wall clock for good,
    which the session chain's later tests (authorizations valid for 10 s) must not see."""
    with Devchain.start(project_dir=REPO) as chain:
        yield chain
