"""``x402srv --config FILE``: bind, check the plugins once, serve, stop.

1. load the config, with ``--host/--port/--workers`` laid over ``[server]``;
2. bind every listener (``sockets``): a port in use is a one-line error naming
   its key, exit 2, before anything else starts;
3. open and close every plugin once (``preflight``): an unreachable store, an
   unsupported network, a wrong chain fail here, exit 2, not inside a worker;
4. serve: one worker in this process, or ``Supervisor`` over N spawned ones;
5. on SIGTERM or SIGINT, stop gracefully (``worker``), exit 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from x402srv.config.models import Config, load_config
from x402srv.server.metrics import MULTIPROCESS_ENV
from x402srv.server.options import with_overrides
from x402srv.server.registry import Built, Registry
from x402srv.server.sockets import bind_listeners, shown_address
from x402srv.server.supervisor import Supervisor
from x402srv.server.worker import GRACEFUL_SECONDS, WorkerSpec, run_worker
from x402srv.settlement.domains import check_domains

__all__ = ["STOP_SECONDS", "preflight", "serve"]

log = logging.getLogger("x402srv")

#: How long the supervisor lets its workers stop before it kills them.
STOP_SECONDS = GRACEFUL_SECONDS + 5.0


def serve(config_path: str, overrides: Mapping[str, Any]) -> int:
    """Serve ``config_path`` until a stop signal; the exit code."""
    config = with_overrides(load_config(config_path), overrides)
    listeners = bind_listeners(config)
    samples: str | None = None
    try:
        asyncio.run(preflight(config, Registry().build(config)))
        if config.metrics.enabled:
            # Set before any worker imports prometheus_client: each writes its samples there.
            samples = tempfile.mkdtemp(prefix="x402srv-metrics-")
            os.environ[MULTIPROCESS_ENV] = samples
        _announce(config)
        spec = WorkerSpec(config_path, dict(overrides), listeners)
        if config.server.workers == 1:
            run_worker(spec)
            code = 0
        else:
            if config.admin is not None and config.admin.enabled:
                from x402srv import admin  # noqa: F401  (imported once, before the workers fork)
            code = Supervisor(spec, config.server.workers, stop_seconds=STOP_SECONDS).run()
    finally:
        listeners.close()
        if samples is not None:  # the workers are gone: their samples die with them
            shutil.rmtree(samples, ignore_errors=True)
    gc.freeze()  # see worker.run_worker: an exit without the full collection
    return code


async def preflight(config: Config, built: Built) -> None:
    """Open and close every plugin once: unreachable stores, unsupported networks, wrong chains.

    Then each token's EIP-712 domain is compared with the chain's (``domains``):
    a mismatch is logged as an error, the server still starts.
    """
    await built.store.start()
    try:
        await built.store.ping()
        await built.settler.start()
        await built.settler.close()
        await built.issuer.start()
        await built.issuer.close()
        await check_domains(config, built.chains)
    finally:
        await built.close_chains()
        await built.store.close()


def _announce(config: Config) -> None:
    server = config.server
    log.info(
        "serving %s on http://%s with %d worker%s; plans: %s",
        config.access_url,
        shown_address(server.host, server.port),
        server.workers,
        "" if server.workers == 1 else "s",
        ", ".join(f"{plan.plan_id} {plan.unit_amount}" for plan in config.plans),
    )
    admin = config.admin
    if admin is not None and admin.enabled and admin.port is not None:
        log.info(
            "console and admin API on http://%s%s",
            shown_address(admin.listen_host, admin.port),
            admin.prefix,
        )
