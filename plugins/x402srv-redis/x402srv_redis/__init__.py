"""x402srv-redis: the ``redis`` store, for several x402srv instances sharing one Redis.

Installed, it registers the store ``redis`` through the ``x402srv`` entry-point
group; a config selects it with ``[store] backend = "redis"`` and
``url = { env = "X402SRV_REDIS_URL" }``.
"""

from .options import RedisOptions
from .plugin import build_redis_store
from .store import RedisStore

__all__ = ["RedisOptions", "RedisStore", "build_redis_store"]
