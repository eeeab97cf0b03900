"""Test helpers for x402srv and its plugins (need the ``test`` extra).

``StoreContract`` (``store_contract``, built on ``store_contract_base``, with
topics in ``store_contract_*``) is the one test-suite every ``Store`` runs,
built-in or third-party; ``builders`` makes records, payment keys and payments
for any suite; ``build_store`` (``plugins``) builds a store from a config the
way the server does. A store that several instances share also runs
``MultiInstanceContract`` (two servers on one ``SharedStore``) and
``OutageContract`` (its server stops mid-settlement).

Nothing is imported eagerly: helper processes started with
``python -m x402srv.testing.<module>`` should not pay for pytest.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if "pytest" in sys.modules:
    import pytest

    # The contract's asserts live outside test files; have pytest rewrite them
    # too so a failing check shows both sides instead of a bare "assert".
    pytest.register_assert_rewrite(
        "x402srv.testing.multi_instance_contract",
        "x402srv.testing.outage_contract",
        "x402srv.testing.store_contract",
        "x402srv.testing.store_contract_base",
        "x402srv.testing.store_contract_counters",
        "x402srv.testing.store_contract_counts",
        "x402srv.testing.store_contract_credits",
        "x402srv.testing.store_contract_listing",
        "x402srv.testing.store_contract_owed",
        "x402srv.testing.store_contract_search",
        "x402srv.testing.store_contract_transfer",
    )

if TYPE_CHECKING:
    from x402srv.testing.multi_instance_contract import MultiInstanceContract, SharedStore
    from x402srv.testing.outage_contract import OutageContract
    from x402srv.testing.plugins import build_store
    from x402srv.testing.store_contract import Reopen, StoreContract

__all__ = [
    "MultiInstanceContract",
    "OutageContract",
    "Reopen",
    "SharedStore",
    "StoreContract",
    "build_store",
]


def __getattr__(name: str) -> Any:
    if name == "build_store":
        from x402srv.testing import plugins

        return plugins.build_store
    if name in ("MultiInstanceContract", "SharedStore"):
        from x402srv.testing import multi_instance_contract

        return getattr(multi_instance_contract, name)
    if name == "OutageContract":
        from x402srv.testing import outage_contract

        return outage_contract.OutageContract
    if name in __all__:
        from x402srv.testing import store_contract

        return getattr(store_contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
