-- Issue 28: a sale's bot defences. The edge enforces them (a proof of work of `pow_min_bits` off-
-- peak up to `pow_max_bits` at the peak of arrivals, to join the room or buy without one; at most
-- `net_admissions` room joins and `net_units` units per network per `net_window_secs`); the origin
-- only stores the settings and shows them in the SKU view. The proof-of-work columns are both set
-- (1 <= min <= max <= 30) or both null (none). The network columns are all null (no limits) or a
-- window of 1..=86400 seconds with at least one bound set, each bound 1..=1000000. A restock (a
-- PUT of the sale) keeps them unless the PUT names `proof_of_work` / `network_limits`.
-- (Every comparison is guarded by IS NOT NULL: a CHECK whose expression is NULL passes.)
ALTER TABLE skus
    ADD COLUMN pow_min_bits smallint NULL,
    ADD COLUMN pow_max_bits smallint NULL,
    ADD COLUMN net_admissions integer NULL,
    ADD COLUMN net_units integer NULL,
    ADD COLUMN net_window_secs integer NULL,
    ADD CONSTRAINT skus_proof_of_work CHECK (
        (pow_min_bits IS NULL AND pow_max_bits IS NULL)
        OR (pow_min_bits IS NOT NULL AND pow_max_bits IS NOT NULL
            AND pow_min_bits BETWEEN 1 AND 30 AND pow_max_bits BETWEEN pow_min_bits AND 30)
    ),
    ADD CONSTRAINT skus_network_limits CHECK (
        (net_admissions IS NULL AND net_units IS NULL AND net_window_secs IS NULL)
        OR (net_window_secs IS NOT NULL AND net_window_secs BETWEEN 1 AND 86400
            AND (net_admissions IS NOT NULL OR net_units IS NOT NULL)
            AND (net_admissions IS NULL OR net_admissions BETWEEN 1 AND 1000000)
            AND (net_units IS NULL OR net_units BETWEEN 1 AND 1000000))
    );
