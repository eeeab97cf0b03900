x402srv reconcile --config seller.toml --grace-seconds 0     # one pass now; prints every change
x402srv challenges list --config seller.toml --state PENDING --limit 100
x402srv challenges show "$CHALLENGE" --config seller.toml    # the record and its full history
x402srv challenges cancel "$CHALLENGE" --config seller.toml  # PENDING -> CANCELLED (then 410)
x402srv audit --config seller.toml --from-block 0            # exit 1 if anything is unmatched
x402srv export-sales --config seller.toml --from 2026-01-01 --format csv   # for accounting
