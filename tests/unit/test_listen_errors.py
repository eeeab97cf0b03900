"""What a listener that cannot be bound says: the key to change, and why.

The cases a test can make for real (a port in use, an address of another
machine) run the command in ``tests/e2e/test_lifecycle.py``. Refused permission
cannot be made here: the suite may run as root, which may bind any port, so
that case is the kernel's answer written by hand.
"""

from __future__ import annotations

import errno

from x402srv.server.sockets import _bind_error, shown_address


def test_permission_denied_names_the_port_key_and_why() -> None:
    error = _bind_error(
        OSError(errno.EACCES, "Permission denied"), "127.0.0.1:80", "127.0.0.1", 80, "server"
    )
    assert str(error) == (
        "server.port: not allowed to listen on 127.0.0.1:80 (a port below 1024 needs privileges)"
    )


def test_an_unexpected_error_names_the_port_key_with_the_system_message() -> None:
    error = _bind_error(OSError(errno.EINVAL, "Invalid argument"), "[::1]:9", "::1", 9, "admin")
    assert str(error) == "admin.port: cannot listen on [::1]:9: Invalid argument"


def test_ipv6_addresses_are_shown_in_brackets() -> None:
    assert shown_address("::1", 8402) == "[::1]:8402"
    assert shown_address("127.0.0.1", 8402) == "127.0.0.1:8402"
