-- Issue 38: the format of a SKU's proof of work. NULL is ALTCHA's v1 (`SHA-256`, the default, as
-- every SKU stored before); `PBKDF2/SHA-256` is ALTCHA's proof of work v2. Set only with the
-- bounds (a SKU without `pow_min_bits` has no proof of work, so no algorithm either).
ALTER TABLE skus
    ADD COLUMN pow_algorithm text NULL,
    ADD CONSTRAINT skus_pow_algorithm CHECK (
        pow_algorithm IS NULL
        OR (pow_algorithm IN ('SHA-256', 'PBKDF2/SHA-256') AND pow_min_bits IS NOT NULL)
    );
