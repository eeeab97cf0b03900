-- Version 4: the OWED state: a top-up paid for a grant that was revoked or
-- expired before it could be credited, its payment owed back to the buyer.
--
-- The state check is replaced by a wider one. NOT VALID: every row already
-- satisfies the narrower check it replaces, so there is nothing to scan, and
-- the table is locked only for the catalog change, not for a pass over it.
-- New writes are checked as before.

ALTER TABLE challenges DROP CONSTRAINT challenges_state_check;
ALTER TABLE challenges ADD CONSTRAINT challenges_state_check CHECK (
    state IN ('PENDING', 'SETTLING', 'PAID', 'DELIVERED', 'EXPIRED', 'CANCELLED', 'OWED')
) NOT VALID;
