-- +goose Up
-- An evaluation computer (issue 34): created with evaluation: true, it
-- serves OSWorld's guest API, whose execute runs code that acts on its
-- screens through an act channel. Chosen at create and kept.
ALTER TABLE computers ADD COLUMN evaluation INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE computers DROP COLUMN evaluation;
