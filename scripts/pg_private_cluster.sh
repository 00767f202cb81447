#!/bin/sh
# A private PostgreSQL cluster for measurements the shared one cannot give (autovacuum on,
# pg_stat_statements loaded), created in a fresh temporary folder and removed again.
#
#   scripts/pg_private_cluster.sh start [PORT]   # prints the folder and the DSN to use
#   scripts/pg_private_cluster.sh stop DIR       # stops it and deletes DIR
#
# PORT defaults to 5499. Needs PostgreSQL's server binaries (initdb, pg_ctl; found through
# pg_config or under /usr/lib/postgresql/*/bin). Run as root, the cluster belongs to the
# `postgres` user. Durability as a production server: fsync on, synchronous_commit on.
# Autovacuum is PostgreSQL's default (on) with a 10 s naptime, as the README suggests for a busy
# server. Trust authentication on 127.0.0.1 only: for measurements on this machine, not more.
set -eu

bindir() {
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
        return
    fi
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && last="$dir"
    done
    [ -n "${last:-}" ] || { echo "no initdb found" >&2; exit 1; }
    echo "$last"
}

as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
start)
    port="${2:-5499}"
    bin="$(bindir)"
    dir="$(mktemp -d /tmp/leaseq-pg-XXXXXX)"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log"
    cat >>"$dir/data/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_stat_statements'
autovacuum = on
autovacuum_naptime = 10s
max_connections = 200
shared_buffers = 512MB
EOF
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE test" postgres
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc \
        "CREATE EXTENSION pg_stat_statements" test
    echo "dir=$dir"
    echo "dsn=postgresql://postgres@127.0.0.1:$port/test"
    ;;
stop)
    dir="${2:?the folder that start printed}"
    case "$dir" in /tmp/leaseq-pg-*) ;; *) echo "not a folder made by start: $dir" >&2; exit 2;; esac
    as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start [PORT] | stop DIR" >&2
    exit 2
    ;;
esac
