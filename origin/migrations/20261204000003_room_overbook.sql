-- Issue 36: a waiting room admits no more passes than the units remaining × `overbook`
-- (1.0..=10.0, default 1.5), stored in hundredths; null (rows from before, or a room set without
-- one) reads as the default. Only meaningful with a room: cleared with it.
ALTER TABLE skus
    ADD COLUMN room_overbook_hundredths INTEGER,
    ADD CONSTRAINT skus_room_overbook CHECK (
        room_overbook_hundredths IS NULL
        OR (room_overbook_hundredths BETWEEN 100 AND 1000 AND room_admit_per_minute IS NOT NULL)
    );
