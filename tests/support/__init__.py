"""Helpers the test modules share (importable as ``tests.support.*``); no tests here.

A test module imports helpers from here, never from another ``test_*`` module or
a ``conftest.py``; fixtures shared across directories live in ``tests/conftest.py``.

- ``seller``: ``Seller`` (a running server process), ``JWT_SECRET``, ``settlement_table``
- ``purchase``: ``buy`` with the official client, ``check_grant``, the guarded ``seller_api``
- ``problems``: ``assert_problem``, ``nothing_changes`` (store and chain untouched)
- ``attacks``: the table of wrong payments the HTTP and A2A bad-input tests share
- ``faults``: a locked store, a facilitator with short timeouts, an issuer failing once
- ``clock``: ``MovableClock``; ``paths``: ``REPO``, ``SAMPLES``
- ``configs``: configs and signed payments for in-process tests, no chain needed
- ``credentials``: issuers, hand-made tokens, guarded apps
- ``gateway``: the test gateway's routes, tokens minted as its issuer would
- ``apps``: the integration apps as server processes, raw HTTP requests
- ``a2a_jsonrpc``, ``a2a_sdk``: A2A over raw JSON-RPC and through the official SDK
- ``rig``, ``racing``, ``scripted``: the in-process pipeline, a store that loses races,
  settlers and issuers that follow a script
- ``cli``, ``command_lines``: the ``x402srv`` command as an operator runs it
- ``issuer_callbacks``, ``seller_callbacks``: callbacks named by dotted path in configs
"""
