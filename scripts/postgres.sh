#!/usr/bin/env bash
# postgres.sh — a local PostgreSQL for the worker's store tests (idempotent).
# Installs Debian's postgresql when missing, starts the cluster as the
# postgres user, and makes a test role and database. It prints the
# WORKER_TEST_DATABASE_URL to use; the role's password (loopback, tests
# only) lives in a 0600 pgpass file the DSN names, never in the output.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# stdout carries the URL and nothing else (callers capture it); everything the
# tools below print (pg_ctlcluster says "Removed stale pid file." after an
# unclean stop, for one) goes to stderr.
exec 3>&1 1>&2
ROLE="${PG_TEST_ROLE:-openbot_test}"
DB="${PG_TEST_DB:-openbot_test}"
PWFILE="${PG_TEST_PASSWORD_FILE:-/var/lib/open-bot/pg-test-password}"
PASSFILE="${PG_TEST_PASSFILE:-/var/lib/open-bot/pg-test.pgpass}"

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
fi
read -r ver cluster port status _ < <(pg_lsclusters -h | head -1)
if [ "$status" != "online" ]; then
  # 3>&-: the server must not inherit the URL pipe, or a caller capturing
  # stdout waits for it to exit.
  # A server killed a moment ago can leave its socket lock behind until it is
  # fully gone, so a failed start is retried a few times.
  for try in 1 2 3 4 5; do
    if pg_ctlcluster "$ver" "$cluster" start 3>&-; then break; fi
    [ "$try" = 5 ] && exit 1
    sleep 1
  done
fi
for _ in $(seq 1 100); do
  if runuser -u postgres -- pg_isready -q -h 127.0.0.1 -p "$port"; then break; fi
  sleep 0.1
done
runuser -u postgres -- pg_isready -q -h 127.0.0.1 -p "$port"

if [ ! -s "$PWFILE" ]; then
  mkdir -p "$(dirname "$PWFILE")"
  (umask 077 && head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$PWFILE")
fi
chmod 600 "$PWFILE"
pw="$(cat "$PWFILE")"
psql_su() { runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$port" "$@"; }
if [ "$(psql_su -tAc "SELECT 1 FROM pg_roles WHERE rolname='$ROLE'")" != 1 ]; then
  psql_su -c "CREATE ROLE $ROLE LOGIN CREATEDB" >/dev/null
fi
# The password is set from stdin so it never shows in a process list.
printf "ALTER ROLE %s PASSWORD '%s';\n" "$ROLE" "$pw" | psql_su >/dev/null
if [ "$(psql_su -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'")" != 1 ]; then
  psql_su -c "CREATE DATABASE $DB OWNER $ROLE" >/dev/null
fi
(umask 077 && printf '*:*:%s:%s:%s\n' "$DB" "$ROLE" "$pw" >"$PASSFILE")
echo "postgres://$ROLE@127.0.0.1:$port/$DB?sslmode=disable&passfile=$PASSFILE" >&3
