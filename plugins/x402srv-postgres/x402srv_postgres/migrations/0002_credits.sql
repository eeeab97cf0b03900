-- Version 2: credit accounts of grants sold by the call (x402srv's CreditStore).
--
-- An account is its JSON (credit_rules.encode_account, without entries) beside
-- its keep_until and a version for compare-and-set, as challenges are. The keys
-- credited to it are rows of credit_entries: the primary key (grant_id, key) is
-- what makes a purchase or a top-up count once, and they go with their account.

CREATE TABLE credits (
    grant_id text COLLATE "C" PRIMARY KEY,
    keep_until double precision NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    account text NOT NULL
);
CREATE INDEX credits_by_keep_until ON credits (keep_until);

CREATE TABLE credit_entries (
    grant_id text COLLATE "C" NOT NULL REFERENCES credits ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    amount bigint NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (grant_id, key)
);
CREATE INDEX credit_entries_in_order ON credit_entries (grant_id, seq);

-- Write an account the caller read at p_version (NULL: it read none) and decided
-- with x402srv's credit rules; with p_key also the entry of that credit. Returns
-- false when someone wrote the account since (read again). p_restart drops the
-- entries of an account that was past its keep_until (it starts anew). An entry
-- that exists already raises XC003, which rolls the whole call back.
CREATE FUNCTION save_account(
    p_grant text,
    p_version bigint,
    p_keep_until double precision,
    p_account text,
    p_restart boolean,
    p_key text,
    p_amount bigint,
    p_at double precision
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_version IS NULL THEN
        INSERT INTO credits (grant_id, keep_until, account)
            VALUES (p_grant, p_keep_until, p_account)
            ON CONFLICT DO NOTHING;
    ELSE
        UPDATE credits SET keep_until = p_keep_until, account = p_account, version = version + 1
         WHERE grant_id = p_grant AND version = p_version;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_restart THEN
        DELETE FROM credit_entries WHERE grant_id = p_grant;
    END IF;
    IF p_key IS NOT NULL THEN
        INSERT INTO credit_entries (grant_id, key, amount, at)
            VALUES (p_grant, p_key, p_amount, p_at)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'XC003', MESSAGE = 'credited before';
        END IF;
    END IF;
    RETURN true;
END
$$;
