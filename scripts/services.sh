# The throwaway services the tests and the benchmarks run against, sourced by scripts/test.sh
# and scripts/bench.sh (after toolchain.sh): a redis-server and a PostgreSQL cluster on free
# ports on 127.0.0.1, in temporary directories, stopped and deleted on exit (the EXIT trap
# set here runs `cleanup`).
cleanup_pids=()
cleanup_dirs=()
cleanup() {
  # PostgreSQL runs detached (pg_ctl): stop it by its data directory before that is removed.
  [ -z "${PG_DIR:-}" ] || stop_postgres
  for p in "${cleanup_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Reap them before removing their directories (redis-server still logs while it shuts down).
  for p in "${cleanup_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "${cleanup_dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT


start_redis() { # sets REDIS_URL and REDIS_PID: a throwaway redis-server on 127.0.0.1, no persistence
  command -v redis-server >/dev/null 2>&1 || rf_die "redis-server not found: run 'make setup' (Debian package redis-server)"
  local dir port
  dir=$(mktemp -d "${TMPDIR:-/tmp}/retry-fetch-redis.XXXXXX")
  cleanup_dirs+=("$dir")
  for _ in 1 2 3 4 5; do # a free port can be taken between the probe and the bind: try again
    rm -f "$dir/redis.log"
    port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" \
      --logfile "$dir/redis.log" --daemonize no >/dev/null 2>&1 &
    REDIS_PID=$!
    cleanup_pids+=("$REDIS_PID")
    for _ in $(seq 100); do
      grep -q 'Ready to accept connections' "$dir/redis.log" 2>/dev/null && break
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    if grep -q 'Ready to accept connections' "$dir/redis.log" 2>/dev/null && kill -0 "$REDIS_PID" 2>/dev/null; then
      REDIS_URL="redis://127.0.0.1:$port"
      return 0
    fi
    stop_redis
  done
  tail -5 "$dir/redis.log" >&2 2>/dev/null || true
  rf_die "redis-server did not start (log above)"
}

stop_redis() { # stops and reaps it, and takes it off the cleanup list (its pid may be reused)
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  local keep=() p
  for p in "${cleanup_pids[@]}"; do [ "$p" = "$REDIS_PID" ] || keep+=("$p"); done
  cleanup_pids=("${keep[@]}")
}

# PostgreSQL refuses to run as root: as root, its programs run as the Debian user `postgres`
# (who owns the cluster's directory); otherwise as the current user.
as_pg() { # command...: run from the cluster's directory (the caller's may be closed to that user)
  if [ "$(id -u)" = 0 ]; then
    (cd "$PG_DIR" && runuser -u postgres -- "$@")
  else
    (cd "$PG_DIR" && "$@")
  fi
}

start_postgres() { # sets DATABASE_URL and PG_DIR: a throwaway PostgreSQL cluster on 127.0.0.1
  # (trust authentication, user postgres, fsync off), in a directory of its own
  local bin port
  bin=$(rf_pg_bin) || rf_die "initdb / pg_ctl not found: run 'make setup' (Debian package postgresql)"
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/retry-fetch-postgres.XXXXXX")
  if [ "$(id -u)" = 0 ]; then
    id -u postgres >/dev/null 2>&1 || rf_die "PostgreSQL will not run as root and there is no user 'postgres' to run it (Debian package postgresql creates it)"
    chown postgres: "$PG_DIR"
  fi
  as_pg "$bin/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync \
    >"$PG_DIR/initdb.log" 2>&1 \
    || { tail -20 "$PG_DIR/initdb.log" >&2; stop_postgres; rf_die "initdb failed (log above)"; }
  for _ in 1 2 3 4 5; do # a free port can be taken between the probe and the bind: try again
    port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
    rm -f "$PG_DIR/postgres.log"
    # The socket goes in the cluster's directory too (Debian's /var/run/postgresql may not exist).
    if as_pg "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$PG_DIR -c fsync=off -c max_connections=200" \
      start >/dev/null 2>&1; then
      DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
      return 0
    fi
    grep -q 'could not bind\|could not create any TCP/IP sockets' "$PG_DIR/postgres.log" 2>/dev/null || break
  done
  tail -20 "$PG_DIR/postgres.log" >&2 2>/dev/null || true
  stop_postgres
  rf_die "PostgreSQL did not start (log above)"
}

stop_postgres() { # stops the cluster at once (nothing in it is kept) and removes its directory
  [ -n "${PG_DIR:-}" ] || return 0
  if [ -f "$PG_DIR/data/postmaster.pid" ]; then
    as_pg "$(rf_pg_bin)/pg_ctl" -D "$PG_DIR/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$PG_DIR"
  PG_DIR=
  DATABASE_URL=
}

