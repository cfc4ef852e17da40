-- The waiting room's check (migration 20261201000004_waiting_room) meant "both columns set, in
-- range, or both null", but a row with one of them set and the other null passed it: a CHECK whose
-- expression is NULL passes, and `BETWEEN` with a NULL is NULL. Such a row reads as no room
-- (`WaitingRoom::from_columns` needs both), so nulling both keeps what every reader already saw;
-- then the check says what it meant, with every comparison guarded.
UPDATE skus
SET room_admit_per_minute = NULL, room_pass_secs = NULL
WHERE (room_admit_per_minute IS NULL) <> (room_pass_secs IS NULL);

ALTER TABLE skus
    DROP CONSTRAINT skus_waiting_room,
    ADD CONSTRAINT skus_waiting_room CHECK (
        (room_admit_per_minute IS NULL AND room_pass_secs IS NULL)
        OR (room_admit_per_minute IS NOT NULL AND room_pass_secs IS NOT NULL
            AND room_admit_per_minute BETWEEN 1 AND 1000000
            AND room_pass_secs BETWEEN 1 AND 86400)
    );
