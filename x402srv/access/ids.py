"""Random identifiers: version-4 UUIDs from a buffered kernel CSPRNG.

``uuid.uuid4()`` asks the kernel for 16 bytes each time (``os.urandom``, one
``getrandom`` system call), and an unpaid request needs three ids (the
challengeId, a generated requestId, the log's request id): on a virtual machine
those calls were a tenth of the time spent answering a 402 (which also declares a
sign-in-with-x nonce of 16 random bytes, ``token_hex16``). Here the kernel is
asked for 4 KiB at once and the ids are cut from it: the same source, the same
128 bits each (122 random, as in ``uuid4``), so challengeIds stay as unguessable
as before. Each byte is handed out once (a lock guards the position), and a
forked child starts with an empty buffer, so no two processes share bytes.
"""

from __future__ import annotations

import os
import threading

__all__ = ["token_hex16", "uuid4_hex", "uuid4_str"]

_CHUNK = 4096
_ID_BYTES = 16


class _RandomPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._buffer = b""
        self._position = _CHUNK

    def take(self) -> bytes:
        with self._lock:
            if self._position + _ID_BYTES > len(self._buffer):
                self._buffer = os.urandom(_CHUNK)
                self._position = 0
            start = self._position
            self._position = start + _ID_BYTES
            return self._buffer[start : start + _ID_BYTES]


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool._reset)


def uuid4_hex() -> str:
    """32 lowercase hex digits of a random version-4 UUID (``uuid.uuid4().hex``)."""
    raw = bytearray(_pool.take())
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def token_hex16() -> str:
    """32 random lowercase hex digits (``secrets.token_hex(16)``), e.g. a sign-in nonce."""
    return _pool.take().hex()


def uuid4_str() -> str:
    """A random version-4 UUID in its canonical form (``str(uuid.uuid4())``)."""
    h = uuid4_hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
