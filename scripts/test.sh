#!/usr/bin/env bash
# Runs the test stages: native, wasm (Node + Chromium), e2e (Node), server (Node + Redis +
# PostgreSQL), browser (Chromium), types.
# `scripts/test.sh` runs them all; `scripts/test.sh e2e browser` runs some.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(native wasm types e2e server package browser)
mkdir -p test-results

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

start_fault_server() { # sets FAULT_URL
  local out=test-results/fault-server.url
  rm -f "$out"
  node tests/support/fault-server.mjs 0 >"$out" &
  cleanup_pids+=($!)
  for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.1; done
  FAULT_URL=$(head -1 "$out")
  [ -n "$FAULT_URL" ] || rf_die "the fault-injecting test server did not start"
}

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

# A stage that ran no test fails: a wrong path, a filter that matches nothing or a test file
# that registers nothing would otherwise pass in silence.

node_tests() { # name, node arguments...: `node --test` with the spec reporter on the terminal
  # and TAP in test-results/<name>.tap, whose `# tests N` must be above 0
  local name=$1 tap="test-results/$1.tap" count
  shift
  rm -f "$tap"
  node --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" "$@"
  count=0
  if [ -f "$tap" ]; then count=$(awk '/^# tests [0-9]+$/ { n = $3 } END { print n + 0 }' "$tap"); fi
  [ "$count" -gt 0 ] || rf_die "$name: node --test ran no test ($tap)"
}

cargo_tests() { # name, command...: a cargo test run, its output as usual (a copy of stdout in
  # test-results/<name>.log); the `running N tests` of its test binaries must add up above 0
  local name=$1 log="test-results/$1.log" count
  shift
  "$@" | tee "$log"
  count=$(awk '/^[[:space:]]*running [0-9]+ tests?[[:space:]]*$/ { n += $2 } END { print n + 0 }' "$log")
  [ "$count" -gt 0 ] || rf_die "$name: cargo test ran no test ($log)"
}

link_pkg() { # node_modules/retry-fetch -> pkg, as `npm install ./pkg` makes it
  [ -f pkg/package.json ] || rf_die "pkg/ is not built: run 'make pkg'"
  for dir in tests/e2e tests/types tests/server; do
    mkdir -p "$dir/node_modules"
    ln -sfn ../../../pkg "$dir/node_modules/retry-fetch"
  done
}

for stage in "${stages[@]}"; do
  case "$stage" in
    native)
      rf_say "native: cargo test (core unit, property and integration tests)"
      cargo_tests native cargo test --quiet
      ;;
    wasm)
      start_fault_server
      wasm_test=(env CARGO_TARGET_DIR=target/wasm-test RF_TEST_SERVER="$FAULT_URL"
        "${RF_WASM_CARGO[@]}" test --target wasm32-unknown-unknown "${RF_BUILD_STD[@]}" --test wasm)
      rf_say "wasm: wasm-bindgen tests in Node"
      cargo_tests wasm-node "${wasm_test[@]}"
      rf_say "wasm: wasm-bindgen tests in headless Chromium"
      cargo_tests wasm-chromium env WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver "${wasm_test[@]}"
      ;;
    e2e)
      link_pkg
      rf_say "e2e: the built package in Node against a fault-injecting server"
      node_tests e2e --expose-gc --test tests/e2e/
      ;;
    server)
      link_pkg
      rf_say "server: core::idempotency doc tests (cargo feature server)"
      cargo_tests server-doc cargo test --quiet --features server --doc idempotency
      rf_say "server: types of retry-fetch/server (tsc --strict)"
      tsc -p tests/server/types/tsconfig.json
      start_redis
      start_postgres
      rf_say "server: retry-fetch/server in Node, MemoryStore, RedisStore (redis-server at $REDIS_URL) and PostgresStore (PostgreSQL at $DATABASE_URL)"
      RETRY_FETCH_REDIS_URL="$REDIS_URL" RETRY_FETCH_DATABASE_URL="$DATABASE_URL" node_tests server --test tests/server/
      if [ -d tests/soak ]; then
        rf_say "soak: 1,000 payments through 'charge, then drop the connection', MemoryStore, RedisStore and PostgresStore"
        REDIS_URL="$REDIS_URL" DATABASE_URL="$DATABASE_URL" node_tests soak --test tests/soak/
      fi
      stop_postgres
      stop_redis
      ;;
    package)
      rf_say "package: npm pack, installed fresh: Node ESM, Node CommonJS, server entry, <script type=module>, manual entry, service worker, Web Worker, Vite build"
      node_tests package --test tests/package/
      ;;
    browser)
      link_pkg
      rf_say "browser: the same scenarios in headless Chromium (playwright-core, Debian's chromium)"
      node_tests browser --test tests/browser/
      ;;
    types)
      rf_say "types: tsc --noEmit --strict on a TypeScript consumer (DOM lib)"
      link_pkg
      tsc -p tests/types/tsconfig.json
      rf_say "types: the same under a Node-only tsconfig (lib ES2022, types node, no DOM lib)"
      tsc -p tests/types/tsconfig.node.json
      ;;
    *) rf_die "unknown test stage: $stage" ;;
  esac
done
rf_say "all requested test stages passed: ${stages[*]}"
