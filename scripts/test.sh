#!/usr/bin/env bash
# Runs the test stages: lint (fmt, clippy, rustdoc), native, wasm (Node + Chromium), e2e
# (Node), server (Node + Redis + PostgreSQL), package, browser (Chromium), types.
# `scripts/test.sh` runs them all; `scripts/test.sh e2e browser` runs some.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint native wasm types e2e server package browser)
mkdir -p test-results

source "$RF_ROOT/scripts/services.sh"

start_fault_server() { # sets FAULT_URL
  local out=test-results/fault-server.url
  rm -f "$out"
  node tests/support/fault-server.mjs 0 >"$out" &
  cleanup_pids+=($!)
  for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.1; done
  FAULT_URL=$(head -1 "$out")
  [ -n "$FAULT_URL" ] || rf_die "the fault-injecting test server did not start"
}

# A stage that ran no test fails: a wrong path, a filter that matches nothing or a test file
# that registers nothing would otherwise pass in silence. So does a stage with a skipped test
# or suite (a `describe` skipped is not even in node's `# skipped` count): a test that needs a
# service it did not get, skipped, would pass in silence too. ALLOW_SKIP (a grep -E pattern)
# names the skip reasons a stage accepts (the browser stage: its "Node only" scenarios).

node_tests() { # name, node arguments...: `node --test` with the spec reporter on the terminal
  # and TAP in test-results/<name>.tap, whose `# tests N` must be above 0 and whose test
  # points must have no `# SKIP` directive (but those whose reason matches ALLOW_SKIP). The
  # TAP is written to a file of this run's own first (another run of the same stage in this
  # checkout must not replace it while it is read), then moved to test-results/<name>.tap.
  local name=$1 tap="test-results/$1.tap" run_tap="test-results/.$1.$$.tap" count skipped status=0
  shift
  rm -f "$run_tap"
  node --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$run_tap" "$@" || status=$?
  [ ! -f "$run_tap" ] || mv -f "$run_tap" "$tap"
  [ "$status" -eq 0 ] || rf_die "$name: node --test failed (exit $status; $tap)"
  count=0
  if [ -f "$tap" ]; then count=$(awk '/^# tests [0-9]+$/ { n = $3 } END { print n + 0 }' "$tap"); fi
  [ "$count" -gt 0 ] || rf_die "$name: node --test ran no test ($tap)"
  # A test point, at any depth: `ok 3 - name # SKIP reason` (a `#` in a name is escaped `\#`).
  skipped=$(grep -E '^[[:space:]]*(not )?ok [0-9]+ - .* # SKIP' "$tap" || true)
  if [ -n "${ALLOW_SKIP:-}" ] && [ -n "$skipped" ]; then
    skipped=$(printf '%s\n' "$skipped" | grep -Ev " # SKIP (${ALLOW_SKIP})\$" || true)
  fi
  if [ -n "$skipped" ]; then
    printf '%s\n' "$skipped" >&2
    rf_die "$name: $(printf '%s\n' "$skipped" | wc -l) test(s) or suite(s) skipped (above; $tap): this stage runs every one"
  fi
}

cargo_tests() { # name, command...: a cargo test run, its output as usual (a copy of stdout in
  # test-results/<name>.log, through a file of this run's own as with node_tests); the
  # `running N tests` of its test binaries must add up above 0
  local name=$1 log="test-results/$1.log" run_log="test-results/.$1.$$.log" count
  shift
  "$@" | tee "$run_log" || { mv -f "$run_log" "$log"; rf_die "$name: cargo test failed ($log)"; }
  mv -f "$run_log" "$log"
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
    lint)
      rf_say "lint: cargo fmt, clippy -D warnings and rustdoc -D warnings, every feature combination, native and wasm32"
      bash scripts/lint.sh
      ;;
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
      # One variable per service, the conventional names (tests/support/services.mjs), and
      # RETRY_FETCH_SERVICES=required: a test that needs one and does not get it fails (and
      # node_tests fails the stage on any skipped test or suite).
      (
        export REDIS_URL DATABASE_URL RETRY_FETCH_SERVICES=required
        rf_say "server: retry-fetch/server in Node, MemoryStore, RedisStore (redis-server at $REDIS_URL) and PostgresStore (PostgreSQL at $DATABASE_URL)"
        node_tests server --test tests/server/
        if [ -d tests/soak ]; then
          rf_say "soak: 1,000 payments through 'charge, then drop the connection', MemoryStore and RedisStore"
          node_tests soak --test tests/soak/
        fi
        if [ -d tests/crash ]; then
          rf_say "crash: server instances and stream workers killed with SIGKILL (PostgresStore, RedisStore), with the tests' retry policy and with default options"
          node_tests crash --test tests/crash/
        fi
      )
      stop_postgres
      stop_redis
      ;;
    package)
      rf_say "package: npm pack, installed fresh: Node ESM, Node CommonJS, server entry, <script type=module>, manual entry, service worker, Web Worker, Vite build, Cloudflare Worker (wrangler, workerd)"
      node_tests package --test tests/package/
      ;;
    browser)
      link_pkg
      rf_say "browser: the same scenarios in headless Chromium (playwright-core, Debian's chromium)"
      ALLOW_SKIP='Node only' node_tests browser --test tests/browser/
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
