"""Random ids from the buffered CSPRNG: real version-4 UUIDs, never repeated."""

from __future__ import annotations

import re
import uuid

from x402srv.access.ids import token_hex16, uuid4_hex, uuid4_str


def test_ids_are_version_4_uuids_in_their_usual_forms() -> None:
    for _ in range(2000):
        text = uuid4_str()
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        raw = uuid4_hex()
        assert uuid.UUID(raw).hex == raw
        assert uuid.UUID(raw).version == 4


def test_ids_do_not_repeat_across_refills() -> None:
    seen = {uuid4_hex() for _ in range(5000)}  # several 4 KiB refills
    assert len(seen) == 5000


def test_random_hex_is_32_digits_never_repeated() -> None:
    seen = {token_hex16() for _ in range(5000)}
    assert len(seen) == 5000
    assert all(re.fullmatch("[0-9a-f]{32}", text) for text in seen)
