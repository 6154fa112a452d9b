#!/usr/bin/env bash
# Installs what the build and the tests need, skipping what is already there.
# A second run costs seconds. Every step says what it does; a failure names the missing piece.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else rf_die "need root to run: $* (install it by hand, or run as root)"; fi
}

APT_UPDATED=0
apt_install() { # packages...
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || rf_die "apt-get not found: install ${missing[*]} with your package manager"
  rf_say "apt-get install ${missing[*]}"
  if [ $APT_UPDATED = 0 ]; then as_root apt-get update -qq || true; APT_UPDATED=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/tmp/retry-fetch-apt.log 2>&1 \
    || { tail -20 /tmp/retry-fetch-apt.log >&2; rf_die "could not install Debian packages: ${missing[*]} (see /tmp/retry-fetch-apt.log)"; }
}

# 1. Node 20+ and npm.
command -v node >/dev/null 2>&1 || rf_die "node not found: install Node.js 20 or newer (Debian: apt-get install nodejs npm)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || rf_die "Node.js $node_major is too old: retry-fetch needs Node.js 20 or newer"

# 2. Rust for the native tests, with clippy and rustfmt for scripts/lint.sh.
command -v cargo >/dev/null 2>&1 || apt_install cargo rustc
if command -v rustup >/dev/null 2>&1; then
  for c in clippy rustfmt; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" \
      || rf_die "the rustup component $c is missing: rustup component add $c"
  done
else
  cargo clippy --version >/dev/null 2>&1 || apt_install rust-clippy
  cargo fmt --version >/dev/null 2>&1 || apt_install rustfmt
fi

# 3. A wasm32 standard library.
if [ "$RF_WASM_MODE" = rustup ]; then
  rf_say "wasm32: using the rustup target wasm32-unknown-unknown"
else
  apt_install rustc-web cargo-web rust-web-src lld-22 rust-web-clippy
  [ -d /usr/lib/rustlib/src/rust/library ] || rf_die "Debian's Rust source is missing (package rust-web-src)"
  /usr/bin/rust-lld -flavor wasm --version >/dev/null 2>&1 || rf_die "/usr/bin/rust-lld does not run (packages rust-web-llvm and lld-22)"
  rf_say "wasm32: Debian $(/usr/bin/rustc --version) with -Zbuild-std"
fi

# 4. wasm-bindgen-cli, exactly the version in Cargo.lock (brings wasm-bindgen-test-runner).
[ -f Cargo.lock ] || cargo generate-lockfile
want=$(rf_wasm_bindgen_version)
have=$("$RF_TOOLS/bin/wasm-bindgen" --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  rf_say "cargo install wasm-bindgen-cli $want into $RF_TOOLS (about 4 minutes on 2 cores)"
  cargo install wasm-bindgen-cli --version "=$want" --root "$RF_TOOLS" --force >/tmp/retry-fetch-wbcli.log 2>&1 \
    || { tail -20 /tmp/retry-fetch-wbcli.log >&2; rf_die "could not install wasm-bindgen-cli $want (see /tmp/retry-fetch-wbcli.log)"; }
fi
rf_say "wasm-bindgen $want"

# 5. Chromium and chromedriver from Debian (never a browser download), Redis and PostgreSQL for
# the server stores (the tests start throwaway servers of their own; see scripts/test.sh).
apt_install chromium chromium-driver
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || rf_die "chromium / chromedriver missing after install"
apt_install redis-server
command -v redis-server >/dev/null 2>&1 || rf_die "redis-server missing after install (package redis-server)"
rf_pg_bin >/dev/null || apt_install postgresql
pg_bin=$(rf_pg_bin) || rf_die "initdb / pg_ctl not found after install (package postgresql; Debian puts them in /usr/lib/postgresql/<version>/bin)"
rf_say "PostgreSQL $("$pg_bin/pg_ctl" --version | awk '{print $NF}') ($pg_bin)"

# 6. npm packages: binaryen (wasm-opt), playwright-core, typescript, the test and bench tools.
stamp=node_modules/.retry-fetch-installed
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  rf_say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error || rf_die "npm ci failed (is the npm registry reachable?)"
  touch "$stamp"
fi
rf_say "set-up complete"
