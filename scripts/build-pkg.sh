#!/usr/bin/env bash
# Builds pkg/: the npm package `retry-fetch` (release wasm, wasm-opt -Oz, JS entries, types).
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

out=pkg
target_dir=target/pkg   # its own target dir: the release flags differ from the test build's
rf_say "cargo build --release --target wasm32-unknown-unknown ($RF_WASM_MODE)"
CARGO_TARGET_DIR=$target_dir CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${RF_SIZE_RUSTFLAGS:-}" \
  "${RF_WASM_CARGO[@]}" build --quiet --release --lib --target wasm32-unknown-unknown \
  "${RF_BUILD_STD[@]}" "${RF_SIZE_FLAGS[@]}"

rm -rf "$out" && mkdir -p "$out"
rf_say "wasm-bindgen --target web"
wasm-bindgen --target web --weak-refs --no-typescript --out-dir "$out" --out-name retry_fetch \
  "$target_dir/wasm32-unknown-unknown/release/retry_fetch.wasm"

rf_say "wasm-opt -Oz (binaryen from npm)"
WASM_OPT="$RF_ROOT/node_modules/.bin/wasm-opt"
[ -x "$WASM_OPT" ] || rf_die "wasm-opt missing: run 'make setup' (npm package binaryen)"
"$WASM_OPT" -Oz --strip-debug --strip-producers \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$out/retry_fetch_bg.wasm" -o "$out/retry_fetch_bg.wasm"

cp js/*.js js/*.d.ts "$out/"
node -e '
  const fs = require("fs");
  const version = fs.readFileSync("Cargo.toml", "utf8").match(/^version = "(.*)"$/m)[1];
  const pkg = JSON.parse(fs.readFileSync("js/package.json", "utf8"));
  pkg.version = version;
  fs.writeFileSync(process.argv[1] + "/package.json", JSON.stringify(pkg, null, 2) + "\n");
' "$out"
cp README.md "$out/" 2>/dev/null || true

wasm="$out/retry_fetch_bg.wasm"
raw=$(stat -c %s "$wasm"); gz=$(gzip -9c "$wasm" | wc -c)
glue=$(cat "$out/retry_fetch.js" "$out/index.browser.js" "$out/client.js" | gzip -9c | wc -c)
rf_say "pkg/ built: retry_fetch_bg.wasm ${raw} bytes raw, ${gz} bytes gzip; JS glue ${glue} bytes gzip; client entry $((gz + glue)) bytes gzip"
