-- +goose Up
-- The provider template a computer was made from (e2b: open-bot or
-- desktop), chosen per computer at create and kept, so a replacement is
-- made from the same template. '' for providers without templates.
ALTER TABLE computers ADD COLUMN template TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE computers DROP COLUMN template;
