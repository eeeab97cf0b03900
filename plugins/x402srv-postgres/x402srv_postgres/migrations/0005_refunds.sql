-- Version 5: refunds (x402srv's RefundStore, docs/refunds.md).
--
-- A refund is its JSON record beside the columns the claim and the listings
-- read, and a version for compare-and-set, as challenges are. The amount is
-- numeric(78, 0): any uint256, exactly. A new table only: old instances never
-- read it, so this step is safe while they serve.

CREATE TABLE refunds (
    refund_id text COLLATE "C" PRIMARY KEY,
    purchase_id text COLLATE "C" NOT NULL,
    state text NOT NULL CHECK (state IN ('REQUESTED', 'SENDING', 'REFUNDED', 'FAILED')),
    amount numeric(78, 0) NOT NULL CHECK (amount > 0),
    created_at double precision NOT NULL,
    version bigint NOT NULL,
    record text NOT NULL
);
CREATE INDEX refunds_by_purchase ON refunds (purchase_id);
CREATE INDEX refunds_by_created ON refunds (created_at, refund_id);
CREATE INDEX refunds_by_state ON refunds (state, created_at, refund_id);
