-- Version 3: what the seller's console reads (x402srv's find_challenges and counters).
--
-- Each record is filed under its payer (store_rules.payer_of: the settled payer,
-- else the payer of the payment being settled, lowercase), computed from the
-- record's JSON by PostgreSQL itself on every write: whatever writes a record
-- (this release's functions, or an instance one release behind), the column
-- and its index follow. A partial index, so unpaid records cost it nothing.

ALTER TABLE challenges ADD COLUMN payer text COLLATE "C" GENERATED ALWAYS AS (
    lower(coalesce(record::jsonb ->> 'payer', record::jsonb -> 'payment' ->> 'payer'))
) STORED;
CREATE INDEX challenges_by_payer ON challenges (payer, updated_at, challenge_id)
    WHERE payer IS NOT NULL;

-- The analytics counters: per hour (bucket, seconds since the epoch) and name,
-- a bounded set per hour; logged, since revenue figures come from them.
CREATE TABLE counts (
    bucket bigint NOT NULL,
    name text COLLATE "C" NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (bucket, name)
);
