"""The seller's console and its admin API, served by x402srv under ``[admin] prefix``.

Off unless ``[admin]`` is configured. ``install_admin`` adds the routes:
the JSON API (``api``) and the web console (``console``), both behind
``gate`` (the admin listener and credential: ``auth``), both reading and
acting through ``service``. Nothing here is on the buyers' hot path.
"""

from __future__ import annotations

from typing import Any

from sanic import Sanic

from ..health import Readiness
from ..pipeline import AccessPipeline
from .api import install_api
from .auth import AdminAuth
from .gate import AdminGate
from .service import AdminService

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
