-- Version 1: challenges with their claims, leases, A2A tasks and the shared hit counters.
--
-- Runs inside the migration's transaction with search_path set to the store's
-- schema (x402srv_postgres.schema), so names here are unqualified; the functions
-- keep that search_path (SET search_path FROM CURRENT) whoever calls them.
--
-- Each record is kept as the exact JSON text every x402srv store writes
-- (ChallengeRecord.to_dict), beside the columns that are looked up, sorted or
-- compared: a new record field needs no migration, and the bytes read back
-- are the bytes written. Ids sort by code point (COLLATE "C"), the order every
-- store lists records in.

CREATE TABLE challenges (
    challenge_id text COLLATE "C" PRIMARY KEY,
    request_id text COLLATE "C" NOT NULL UNIQUE,
    state text NOT NULL CHECK (
        state IN ('PENDING', 'SETTLING', 'PAID', 'DELIVERED', 'EXPIRED', 'CANCELLED')
    ),
    updated_at double precision NOT NULL,
    -- Bumped by every transition: the compare-and-set of transition() below.
    version bigint NOT NULL DEFAULT 1,
    record text NOT NULL
);
-- Listing pages are one index range: (updated_at, challenge_id) is the cursor.
CREATE INDEX challenges_by_updated ON challenges (updated_at, challenge_id);
CREATE INDEX challenges_by_state ON challenges (state, updated_at, challenge_id);

-- A claim's primary key is the claim: the database keeps one owner per payment
-- and per txHash. A record takes its claims with it when it is pruned.
CREATE TABLE payment_claims (
    payment_key text COLLATE "C" PRIMARY KEY,
    challenge_id text COLLATE "C" NOT NULL REFERENCES challenges ON DELETE CASCADE
);
CREATE INDEX payment_claims_by_challenge ON payment_claims (challenge_id);

CREATE TABLE tx_claims (
    tx_hash text COLLATE "C" PRIMARY KEY,
    challenge_id text COLLATE "C" NOT NULL REFERENCES challenges ON DELETE CASCADE
);
CREATE INDEX tx_claims_by_challenge ON tx_claims (challenge_id);

-- Fenced leases (the gas wallet's nonce, the reconciler): fence only grows.
CREATE TABLE leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    fence bigint NOT NULL,
    expires_at double precision NOT NULL,
    released boolean NOT NULL,
    value text
);

CREATE TABLE tasks (
    task_id text PRIMARY KEY,
    version bigint NOT NULL,
    document text NOT NULL,
    prune_after double precision
);
CREATE INDEX tasks_by_prune_after ON tasks (prune_after) WHERE prune_after IS NOT NULL;

-- The unpaid-request limit's counters: short-lived and cheap to lose (a lost
-- window only lets a client start its count again), so not WAL-logged. A
-- crash or a failover empties the table.
CREATE UNLOGGED TABLE rate_counters (
    key text PRIMARY KEY,
    window_end double precision NOT NULL,
    hits bigint NOT NULL
);
CREATE INDEX rate_counters_by_window_end ON rate_counters (window_end);

-- A compare-and-set transition with its claims, in one round trip and one
-- transaction. The caller read the record at p_version and decided the move
-- (x402srv's store rules); this writes it only if nobody wrote since, then
-- releases and takes claims. A claim another challenge owns raises
-- XC001 (payment) or XC002 (txHash) with the owner as the message, which
-- rolls the whole call back: nothing of the move is written.
-- Returns 'applied', 'stale' (the record moved meanwhile: read again) or
-- 'missing'.
CREATE FUNCTION transition(
    p_id text,
    p_version bigint,
    p_state text,
    p_updated_at double precision,
    p_record text,
    p_claim text,
    p_tx text,
    p_release text
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner text;
BEGIN
    UPDATE challenges
       SET state = p_state, updated_at = p_updated_at, record = p_record, version = version + 1
     WHERE challenge_id = p_id AND version = p_version;
    IF NOT FOUND THEN
        PERFORM 1 FROM challenges WHERE challenge_id = p_id;
        RETURN CASE WHEN FOUND THEN 'stale' ELSE 'missing' END;
    END IF;
    IF p_release IS NOT NULL THEN
        DELETE FROM payment_claims WHERE payment_key = p_release AND challenge_id = p_id;
    END IF;
    IF p_claim IS NOT NULL THEN
        INSERT INTO payment_claims (payment_key, challenge_id) VALUES (p_claim, p_id)
            ON CONFLICT (payment_key) DO NOTHING;
        IF NOT FOUND THEN
            SELECT challenge_id INTO v_owner FROM payment_claims WHERE payment_key = p_claim;
            IF v_owner IS DISTINCT FROM p_id THEN
                RAISE EXCEPTION USING ERRCODE = 'XC001', MESSAGE = coalesce(v_owner, '');
            END IF;
        END IF;
    END IF;
    IF p_tx IS NOT NULL THEN
        INSERT INTO tx_claims (tx_hash, challenge_id) VALUES (p_tx, p_id)
            ON CONFLICT (tx_hash) DO NOTHING;
        IF NOT FOUND THEN
            SELECT challenge_id INTO v_owner FROM tx_claims WHERE tx_hash = p_tx;
            IF v_owner IS DISTINCT FROM p_id THEN
                RAISE EXCEPTION USING ERRCODE = 'XC002', MESSAGE = coalesce(v_owner, '');
            END IF;
        END IF;
    END IF;
    RETURN 'applied';
END
$$;

-- Insert a challenge and claim its payment together (discovery-first
-- purchases). An existing requestId wins: ('exists', its record). A taken
-- challengeId: ('duplicate', NULL). A payment another challenge owns raises
-- XC001 like transition(), so the insert is rolled back with it.
CREATE FUNCTION create_claimed(
    p_id text,
    p_request text,
    p_state text,
    p_updated_at double precision,
    p_record text,
    p_claim text,
    OUT outcome text,
    OUT existing text
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner text;
BEGIN
    INSERT INTO challenges (challenge_id, request_id, state, updated_at, record)
        VALUES (p_id, p_request, p_state, p_updated_at, p_record)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT record INTO existing FROM challenges WHERE request_id = p_request;
        outcome := CASE WHEN FOUND THEN 'exists' ELSE 'duplicate' END;
        RETURN;
    END IF;
    INSERT INTO payment_claims (payment_key, challenge_id) VALUES (p_claim, p_id)
        ON CONFLICT (payment_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT challenge_id INTO v_owner FROM payment_claims WHERE payment_key = p_claim;
        RAISE EXCEPTION USING ERRCODE = 'XC001', MESSAGE = coalesce(v_owner, '');
    END IF;
    outcome := 'created';
END
$$;
