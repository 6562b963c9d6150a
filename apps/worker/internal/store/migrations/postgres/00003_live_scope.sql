-- +goose Up
-- At most one live (not destroyed) computer per scope (seed 003): the store
-- enforces it, so two workers on one database cannot both make one.
-- scope_key is scope_kind:scope_id. Computers made before this rule keep
-- working: of several live ones of one scope only the newest gets the key
-- (NULLs never collide in a unique index).
ALTER TABLE computers ADD COLUMN scope_key TEXT;
UPDATE computers SET scope_key = scope_kind || ':' || scope_id
 WHERE observed_state <> 'destroyed'
   AND NOT EXISTS (SELECT 1 FROM computers n
     WHERE n.scope_kind = computers.scope_kind AND n.scope_id = computers.scope_id AND n.observed_state <> 'destroyed'
       AND (n.created_at > computers.created_at OR (n.created_at = computers.created_at AND n.id > computers.id)));
CREATE UNIQUE INDEX computers_live_scope ON computers(scope_key) WHERE observed_state <> 'destroyed';
-- A Private computer has exactly one bot: its bot row is "sole", and a
-- computer has at most one sole bot.
ALTER TABLE bots ADD COLUMN sole INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX bots_sole ON bots(computer_id) WHERE sole = 1;

-- +goose Down
DROP INDEX bots_sole;
ALTER TABLE bots DROP COLUMN sole;
DROP INDEX computers_live_scope;
ALTER TABLE computers DROP COLUMN scope_key;
