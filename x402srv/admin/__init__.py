"""The seller's console and its admin API, served by x402srv under ``[admin] prefix``.

Off unless ``[admin]`` is configured. ``install_admin`` adds the routes:
the JSON API (``api``) and the web console (``console``), both behind
``gate`` (the admin listener and credential: ``auth``), both reading and
acting through ``service``. Nothing here is on the buyers' hot path.
"""

from __future__ import annotations

from typing import Any

from sanic import Sanic

from x402srv.access.pipeline import AccessPipeline
from x402srv.admin.api import install_api
from x402srv.admin.auth import AdminAuth
from x402srv.admin.console import install_console
from x402srv.admin.gate import AdminGate
from x402srv.admin.service import AdminService
from x402srv.server.health import Readiness

__all__ = ["install_admin"]


def install_admin(app: Sanic[Any, Any], pipeline: AccessPipeline, readiness: Readiness) -> None:
    """Add the admin routes of ``pipeline.config`` (nothing when ``[admin]`` is off)."""
    config = pipeline.config
    admin = config.admin
    if admin is None or not admin.enabled:
        return
    auth = AdminAuth(admin, config.seller.agent_url, pipeline.clock)
    gate = AdminGate(admin, auth)
    service = AdminService(pipeline, readiness)
    install_api(app, gate, service)
    install_console(app, gate, service, admin.secure_cookies)
