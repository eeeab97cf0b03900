"""Refunds: money back to a purchase's buyer, exactly once on-chain (docs/refunds.md).

records.py   the refund record and its states
rules.py     what every store decides inside its atomic step (never past what was paid)
store.py     the ``RefundStore`` capability the stores implement
wallet.py    the refund wallet: its key, its EIP-3009 signature, its balance
sender.py    one refund through the network's settlers, decided by the chain when unsure
service.py   asking for a refund of a purchase (CLI, admin API, automatic rules)
"""
