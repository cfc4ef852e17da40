-- Issue 17: a sale's waiting room. The edge runs the room (admission at `admit_per_minute`, passes
-- usable for `pass_secs`); the origin only stores the setting and shows it in the SKU view. Both
-- columns are set or both null (no room). A restock (a PUT of the sale) keeps them unless the PUT
-- names `waiting_room`.
ALTER TABLE skus
    ADD COLUMN room_admit_per_minute integer NULL,
    ADD COLUMN room_pass_secs integer NULL,
    ADD CONSTRAINT skus_waiting_room CHECK (
        (room_admit_per_minute IS NULL AND room_pass_secs IS NULL)
        OR (room_admit_per_minute BETWEEN 1 AND 1000000 AND room_pass_secs BETWEEN 1 AND 86400)
    );
