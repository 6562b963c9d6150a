-- +goose Up
CREATE TABLE teams (
  id TEXT PRIMARY KEY,
  created_at INTEGER NOT NULL
);
CREATE TABLE computers (
  id TEXT PRIMARY KEY,
  scope_kind TEXT NOT NULL,
  scope_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  provider TEXT NOT NULL,
  provider_ref TEXT NOT NULL DEFAULT '',
  botd_token BLOB,
  desired_state TEXT NOT NULL,
  observed_state TEXT NOT NULL,
  state_deadline INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  home_key TEXT NOT NULL,
  home_revision INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE TABLE bots (
  computer_id TEXT NOT NULL REFERENCES computers(id),
  id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (computer_id, id)
);
CREATE TABLE bot_leases (
  lease_key TEXT PRIMARY KEY,
  epoch INTEGER NOT NULL,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  computer_id TEXT NOT NULL REFERENCES computers(id),
  bot_id TEXT NOT NULL,
  lease_key TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  state TEXT NOT NULL,
  prompt TEXT NOT NULL,
  model TEXT NOT NULL,
  thread_id TEXT NOT NULL DEFAULT '',
  turn_id TEXT NOT NULL DEFAULT '',
  message TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  ended_at INTEGER NOT NULL DEFAULT 0,
  last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_state ON runs(state);
CREATE INDEX runs_computer ON runs(computer_id);
CREATE TABLE run_events (
  run_id TEXT NOT NULL REFERENCES runs(id),
  seq INTEGER NOT NULL,
  at INTEGER NOT NULL,
  type TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE checkpoints (
  computer_id TEXT NOT NULL REFERENCES computers(id),
  revision INTEGER NOT NULL,
  size INTEGER NOT NULL,
  at INTEGER NOT NULL,
  PRIMARY KEY (computer_id, revision)
);

-- +goose Down
DROP TABLE checkpoints;
DROP TABLE run_events;
DROP TABLE runs;
DROP TABLE bot_leases;
DROP TABLE bots;
DROP TABLE computers;
DROP TABLE teams;
