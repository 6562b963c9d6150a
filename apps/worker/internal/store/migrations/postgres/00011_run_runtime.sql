-- +goose Up
-- Where a run's agent loop runs (issue 30): "machine" (Codex in the
-- computer, every run before this) or "worker" (the worker's own loop).
ALTER TABLE runs ADD COLUMN runtime TEXT NOT NULL DEFAULT 'machine';

-- +goose Down
ALTER TABLE runs DROP COLUMN runtime;
