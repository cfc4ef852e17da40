#!/bin/bash
# Stand-in postgres:15 entrypoint (scripts/containers/standins.Containerfile), the part of the
# upstream docker-entrypoint.sh that docker-compose.yml relies on: an empty $PGDATA is initialised
# with POSTGRES_USER / POSTGRES_PASSWORD (required) / POSTGRES_DB, TCP logins need the password
# (scram-sha-256), then the server runs as `postgres` in the foreground, listening on all
# interfaces.
set -euo pipefail
if [[ ${1:-} != postgres ]]; then exec "$@"; fi
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 0700 "$PGDATA"
if [[ ! -s $PGDATA/PG_VERSION ]]; then
    pw=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
    chown postgres "$pw"
    as_pg initdb -D "$PGDATA" --username="$user" --pwfile="$pw" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pw"
    printf "listen_addresses = '*'\n" >> "$PGDATA/postgresql.conf"
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [[ $db != postgres ]]; then
        as_pg psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres -q \
            -c "CREATE DATABASE \"$db\""
    fi
    as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "stand-in postgres: initialised $PGDATA (user $user, database $db)"
fi
shift
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
