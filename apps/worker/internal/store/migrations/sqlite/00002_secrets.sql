-- +goose Up
CREATE TABLE secrets (
  computer_id TEXT NOT NULL REFERENCES computers(id),
  name TEXT NOT NULL,
  origin TEXT NOT NULL,
  value BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (computer_id, name)
);

-- +goose Down
DROP TABLE secrets;
