#!/usr/bin/env bash
# Runs the test stages: native, wasm (Node + Chromium), e2e (Node), browser (Chromium), types.
# `scripts/test.sh` runs them all; `scripts/test.sh e2e browser` runs some.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(native wasm types e2e browser)
mkdir -p test-results

cleanup_pids=()
cleanup() { for p in "${cleanup_pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
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

link_pkg() { # node_modules/retry-fetch -> pkg, as `npm install ./pkg` makes it
  [ -f pkg/package.json ] || rf_die "pkg/ is not built: run 'make pkg'"
  for dir in tests/e2e tests/types; do
    mkdir -p "$dir/node_modules"
    ln -sfn ../../../pkg "$dir/node_modules/retry-fetch"
  done
}

for stage in "${stages[@]}"; do
  case "$stage" in
    native)
      rf_say "native: cargo test (core unit, property and integration tests)"
      cargo test --quiet
      ;;
    wasm)
      start_fault_server
      wasm_test=(env CARGO_TARGET_DIR=target/wasm-test RF_TEST_SERVER="$FAULT_URL"
        "${RF_WASM_CARGO[@]}" test --target wasm32-unknown-unknown "${RF_BUILD_STD[@]}" --test wasm)
      rf_say "wasm: wasm-bindgen tests in Node"
      "${wasm_test[@]}"
      rf_say "wasm: wasm-bindgen tests in headless Chromium"
      WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver "${wasm_test[@]}"
      ;;
    e2e)
      link_pkg
      rf_say "e2e: the built package in Node against a fault-injecting server"
      node --test --test-reporter=spec tests/e2e/
      ;;
    browser)
      link_pkg
      rf_say "browser: the same scenarios in headless Chromium (playwright-core, Debian's chromium)"
      node --test --test-reporter=spec tests/browser/
      ;;
    types)
      rf_say "types: tsc --noEmit --strict on a TypeScript consumer"
      link_pkg
      tsc -p tests/types/tsconfig.json
      ;;
    *) rf_die "unknown test stage: $stage" ;;
  esac
done
rf_say "all requested test stages passed: ${stages[*]}"
