#!/usr/bin/env bash
# Builds pkg/: the npm package `retry-fetch` (release wasm, wasm-opt -Oz, JS entries, types).
#
# The crate is built twice (its Cargo features are additive):
#   1. the client (default features, `client`): retry_fetch_bg.wasm + retry_fetch.js, for the
#      '.' entry;
#   2. `--no-default-features --features server`: retry_fetch_server_bg.wasm +
#      retry_fetch_server.js, for the './server' entry (idempotency on the server), so neither
#      .wasm carries the other's code.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

target_dir=target/pkg   # its own target dir: the release flags differ from the test build's
out=$target_dir/stage    # assembled here, then moved to pkg/ at once (other runs may be using pkg/)

# Nothing to do when nothing the build reads has changed since the build that made pkg/, and
# pkg/ is still what that build made. The stamp holds a hash of the inputs (sources, manifests,
# lock files, JS entries, README.md, these scripts, the tools' versions and flags) and one of
# pkg/. `scripts/build-pkg.sh --force` (or RF_FORCE_PKG=1) builds regardless.
stamp=$target_dir/pkg.stamp
inputs_hash() {
  {
    find src js -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum
    for f in Cargo.toml Cargo.lock package-lock.json README.md .cargo/config.toml \
      scripts/build-pkg.sh scripts/toolchain.sh scripts/guard-glue.mjs scripts/short-imports.mjs scripts/inline-catch.mjs \
      scripts/trim-init.mjs scripts/short-exports.mjs scripts/wasm-bytes.mjs; do
      if [ -f "$f" ]; then sha256sum "$f"; else echo "absent $f"; fi
    done
    printf '%s\n' "$RF_WASM_MODE" "${RF_WASM_CARGO[*]}" "${RF_BUILD_STD[*]}" "${RF_SIZE_FLAGS[*]}" \
      "${RF_SIZE_RUSTFLAGS:-}" "${RUSTFLAGS:-}" "${RF_WASM_OPT_FLAGS[*]}"
    if [ "$RF_WASM_MODE" = debian ]; then /usr/bin/rustc -vV; else rustc -vV; fi
    wasm-bindgen --version
    node --version
  } | sha256sum | cut -d' ' -f1
}
pkg_hash() { find pkg -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum | sha256sum | cut -d' ' -f1; }
inputs=$(inputs_hash)
if [ "${1:-}" != --force ] && [ "${RF_FORCE_PKG:-}" != 1 ] && [ -f "$stamp" ] && [ -d pkg ] \
  && [ "$(cat "$stamp")" = "$inputs $(pkg_hash)" ]; then
  rf_say "pkg/ is up to date: no input changed since it was built (scripts/build-pkg.sh --force rebuilds)"
  exit 0
fi

rm -rf "$out" && mkdir -p "$out"

WASM_OPT="$RF_ROOT/node_modules/.bin/wasm-opt"
[ -x "$WASM_OPT" ] || rf_die "wasm-opt missing: run 'make setup' (npm package binaryen)"

build_wasm() { # out-name [cargo args...]: cargo build, wasm-bindgen --target web, wasm-opt -Oz
  local name=$1; shift
  rf_say "cargo build --release --target wasm32-unknown-unknown $* ($RF_WASM_MODE)"
  CARGO_TARGET_DIR=$target_dir CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${RF_SIZE_RUSTFLAGS:-}" \
    "${RF_WASM_CARGO[@]}" build --quiet --release --lib --target wasm32-unknown-unknown \
    "${RF_BUILD_STD[@]}" "${RF_SIZE_FLAGS[@]}" "$@"

  rf_say "wasm-bindgen --target web --out-name $name"
  wasm-bindgen --target web --weak-refs --no-typescript --out-dir "$out" --out-name "$name" \
    "$target_dir/wasm32-unknown-unknown/release/retry_fetch.wasm"

  rf_say "wasm-opt -Oz $name (binaryen from npm)"
  "$WASM_OPT" "${RF_WASM_OPT_FLAGS[@]}" --strip-debug --strip-producers \
    "$out/${name}_bg.wasm" -o "$out/${name}_bg.wasm"
}

build_wasm retry_fetch
node scripts/short-imports.mjs "$out/retry_fetch_bg.wasm" "$out/retry_fetch.js"
node scripts/guard-glue.mjs "$out/retry_fetch.js"
node scripts/inline-catch.mjs "$out/retry_fetch.js"
node scripts/trim-init.mjs "$out/retry_fetch.js"
node scripts/short-exports.mjs "$out/retry_fetch_bg.wasm" "$out/retry_fetch.js"

# The CommonJS entry (require('retry-fetch') in Node): wasm-bindgen's nodejs glue over the same
# client build, in cjs/ (its own package.json says commonjs; the package is "type": "module").
rf_say "wasm-bindgen --target nodejs (CommonJS entry)"
mkdir -p "$out/cjs"
wasm-bindgen --target nodejs --weak-refs --no-typescript --out-dir "$out/cjs" --out-name retry_fetch \
  "$target_dir/wasm32-unknown-unknown/release/retry_fetch.wasm"
"$WASM_OPT" "${RF_WASM_OPT_FLAGS[@]}" --strip-debug --strip-producers \
  "$out/cjs/retry_fetch_bg.wasm" -o "$out/cjs/retry_fetch_bg.wasm"
node scripts/short-imports.mjs "$out/cjs/retry_fetch_bg.wasm" "$out/cjs/retry_fetch.js"
node scripts/guard-glue.mjs "$out/cjs/retry_fetch.js"
node scripts/inline-catch.mjs "$out/cjs/retry_fetch.js"
node scripts/short-exports.mjs "$out/cjs/retry_fetch_bg.wasm" "$out/cjs/retry_fetch.js"
echo '{ "type": "commonjs" }' > "$out/cjs/package.json"

build_wasm retry_fetch_server --no-default-features --features server
# Its imports that may throw catch inline too (about 30 such calls per keyed request).
node scripts/inline-catch.mjs "$out/retry_fetch_server.js"

cp js/*.js js/*.cjs js/*.d.ts "$out/"
cp js/index.d.ts "$out/index.d.cts"
node -e '
  const fs = require("fs");
  const version = fs.readFileSync("Cargo.toml", "utf8").match(/^version = "(.*)"$/m)[1];
  const pkg = JSON.parse(fs.readFileSync("js/package.json", "utf8"));
  pkg.version = version;
  fs.writeFileSync(process.argv[1] + "/package.json", JSON.stringify(pkg, null, 2) + "\n");
' "$out"
cp README.md "$out/" 2>/dev/null || true

# Minify the shipped JavaScript (terser from npm): what a page without a bundler downloads.
# Readable sources are in js/ of the repository; the .d.ts files document the API.
rf_say "terser: minify the package's JavaScript"
for f in "$out"/*.js "$out"/*.cjs "$out"/cjs/*.js; do
  case "$f" in *.cjs|*/cjs/*) kind=() ;; *) kind=(--module) ;; esac
  terser "$f" "${kind[@]}" --compress passes=2 --mangle --comments false -o "$f.min"
  mv "$f.min" "$f"
done
rm -rf pkg && mv "$out" pkg
out=pkg
echo "$inputs $(pkg_hash)" > "$stamp"

wasm="$out/retry_fetch_bg.wasm"
raw=$(stat -c %s "$wasm"); gz=$(gzip -9c "$wasm" | wc -c)
glue=$(cat "$out/retry_fetch.js" "$out/index.browser.js" "$out/load-wasm.js" | gzip -9c | wc -c)
rf_say "pkg/ built: retry_fetch_bg.wasm ${raw} bytes raw, ${gz} bytes gzip; JS glue ${glue} bytes gzip; client entry $((gz + glue)) bytes gzip"
swasm="$out/retry_fetch_server_bg.wasm"
sraw=$(stat -c %s "$swasm"); sgz=$(gzip -9c "$swasm" | wc -c)
rf_say "server entry: retry_fetch_server_bg.wasm ${sraw} bytes raw, ${sgz} bytes gzip (Node-side, not shipped to browsers)"
