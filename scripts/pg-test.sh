#!/usr/bin/env bash
# A throwaway Postgres for tests: initdb into a temporary directory, a server
# listening only on a Unix socket in that directory (no TCP), stopped and
# removed at the end.
#
#   bash scripts/pg-test.sh run CMD...   run CMD with TOOLGATE_TEST_POSTGRES set,
#                                        then stop the server and remove it
#                                        (also on failure or Ctrl-C); exits
#                                        with CMD's status
#   bash scripts/pg-test.sh start        start one and print the export line
#                                        and the directory to stop
#   bash scripts/pg-test.sh stop DIR     stop and remove the one in DIR
#   bash scripts/pg-test.sh down DIR     stop the server of DIR, keeping its data
#   bash scripts/pg-test.sh up DIR       start it again
#
# A test that takes a server down and up again (a Postgres restart, an
# outage) starts one of its own with start, so that other packages' tests
# running meanwhile on the shared one are not disturbed.
#
# It uses Debian's postgresql package (/usr/lib/postgresql/*/bin), installing
# it with apt-get when it is missing and the script runs as root. Postgres
# refuses to run as root: as root, initdb and the server run as the postgres
# user (runuser).
#
# Example: bash scripts/pg-test.sh run go test -race ./txn
set -euo pipefail

die() { echo "pg-test: $*" >&2; exit 2; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [ -z "$d" ] && command -v initdb >/dev/null 2>&1; then
    d=$(dirname "$(command -v initdb)")
  fi
  echo "$d"
}

ensure_postgres() {
  if [ -n "$(bindir)" ]; then return; fi
  [ "$(id -u)" = 0 ] || die "Postgres is not installed (no /usr/lib/postgresql/*/bin); install Debian's postgresql package"
  echo "pg-test: installing postgresql with apt-get" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  [ -n "$(bindir)" ] || die "apt-get installed postgresql but no /usr/lib/postgresql/*/bin appeared"
}

# as_pg CMD...: runs CMD as the postgres user when root, else as is.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# server_up DIR: starts the server of DIR (initialized), waiting until it answers.
server_up() {
  local dir=$1 bin
  bin=$(bindir)
  # No TCP at all (listen_addresses=''): the socket directory is the only way in.
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/sock/server.log" -w -t 60 \
      -o "-c listen_addresses='' -c unix_socket_directories='$dir/sock' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >"$dir/pg_ctl.log" 2>&1
}

# start: initdb and start a server; prints the directory.
start() {
  ensure_postgres
  local bin dir
  bin=$(bindir)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-pg.XXXXXX")
  chmod 755 "$dir"
  mkdir "$dir/data" "$dir/sock"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/data" "$dir/sock"; fi
  if ! as_pg "$bin/initdb" -D "$dir/data" -U toolgate --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2; rm -rf "$dir"; die "initdb failed"
  fi
  if ! server_up "$dir"; then
    cat "$dir/pg_ctl.log" "$dir/sock/server.log" >&2 || true
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"; die "the server did not start"
  fi
  if ! as_pg "$bin/createdb" -h "$dir/sock" -U toolgate toolgate_test >"$dir/createdb.log" 2>&1; then
    cat "$dir/createdb.log" >&2; stop "$dir"; die "createdb failed"
  fi
  echo "$dir"
}

url() { echo "postgres://toolgate@/toolgate_test?host=$1/sock&sslmode=disable"; }

stop() {
  local dir=$1 bin
  bin=$(bindir)
  [ -d "$dir/data" ] || die "$dir is not a pg-test directory"
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 ||
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
  run)
    shift
    [ $# -gt 0 ] || die "usage: pg-test.sh run CMD..."
    dir=$(start)
    trap 'stop "$dir"' EXIT
    trap 'exit 130' INT TERM
    export TOOLGATE_TEST_POSTGRES
    TOOLGATE_TEST_POSTGRES=$(url "$dir")
    echo "pg-test: TOOLGATE_TEST_POSTGRES=$TOOLGATE_TEST_POSTGRES" >&2
    set +e
    "$@"
    status=$?
    set -e
    exit $status
    ;;
  start)
    dir=$(start)
    echo "export TOOLGATE_TEST_POSTGRES='$(url "$dir")'"
    echo "# stop and remove it with: bash $0 stop $dir"
    ;;
  stop)
    [ $# -eq 2 ] || die "usage: pg-test.sh stop DIR"
    stop "$2"
    ;;
  down)
    [ $# -eq 2 ] && [ -d "$2/data" ] || die "usage: pg-test.sh down DIR (a pg-test directory)"
    as_pg "$(bindir)/pg_ctl" -D "$2/data" -m fast -w stop >/dev/null
    ;;
  up)
    [ $# -eq 2 ] && [ -d "$2/data" ] || die "usage: pg-test.sh up DIR (a pg-test directory)"
    server_up "$2" || { cat "$2/pg_ctl.log" >&2; die "the server did not start"; }
    ;;
  *)
    die "usage: pg-test.sh run CMD... | start | stop DIR | down DIR | up DIR"
    ;;
esac
