-- +goose Up
CREATE TABLE secrets (
  computer_id TEXT NOT NULL REFERENCES computers(id),
  name TEXT NOT NULL,
  origin TEXT NOT NULL,
  value BYTEA NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (computer_id, name)
);

-- +goose Down
DROP TABLE secrets;
