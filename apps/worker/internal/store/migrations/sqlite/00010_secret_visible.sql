-- +goose Up
-- A secret types only into a masked password field unless it was stored
-- visible (issue 36); those stored before are not.
ALTER TABLE secrets ADD COLUMN visible INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE secrets DROP COLUMN visible;
