# Sourced by the other scripts: where the tools are and how to build for wasm32.
# shellcheck shell=bash

# Tools installed by scripts/setup.sh live here, so a second run on the same machine skips them.
RF_TOOLS="${RETRY_FETCH_TOOLS:-$HOME/.cache/retry-fetch/tools}"
export PATH="$RF_TOOLS/bin:$PATH"
RF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$RF_ROOT/node_modules/.bin:$PATH"

# wasm32 builds: a rustup toolchain that has the wasm32 std, or Debian's Rust with the std built
# from source (-Zbuild-std: the wasm32 std cannot be downloaded where Debian packages are the
# only source; CONTRIBUTING.md, "Toolchain").
if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  RF_WASM_MODE=rustup
  RF_WASM_CARGO=(cargo)
  RF_WASM_CLIPPY=(cargo clippy)
  RF_BUILD_STD=()
  RF_SIZE_FLAGS=()
  RF_SIZE_RUSTFLAGS=""
else
  RF_WASM_MODE=debian
  RF_WASM_CARGO=(env RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 /usr/bin/cargo)
  # Debian's clippy (package rust-web-clippy), called directly: `/usr/bin/cargo clippy` would run
  # rustup's cargo-clippy proxy from ~/.cargo/bin (cargo searches there before PATH), i.e. the
  # rustup toolchain, which has no std source to build. CARGO makes it drive Debian's cargo.
  RF_WASM_CLIPPY=(env RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 CARGO=/usr/bin/cargo
    /usr/bin/cargo-clippy clippy)
  RF_BUILD_STD=(-Zbuild-std=std,panic_abort)
  # Release package only: panics abort without formatting (smaller), std built for size, and
  # every function of the other crates (std, wasm-bindgen, js-sys...) offered to LLVM's inliner
  # as one of ours (-Zcross-crate-inline-threshold=always: about 4.5 kB gzip less, as the
  # small wrappers fold into their callers and the glue between them goes). And LLVM's inliner
  # counts a call as 45 (default 25), so more tiny callees go inline (-0.45 kB; 40 to 50
  # measure alike, 30 and 60 worse).
  RF_SIZE_FLAGS=(-Zbuild-std-features=optimize_for_size)
  RF_SIZE_RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort -Zfmt-debug=none -Zlocation-detail=none -Zcross-crate-inline-threshold=always"
  RF_SIZE_RUSTFLAGS="${RF_SIZE_RUSTFLAGS} -Cllvm-args=-inline-call-penalty=45"
fi

# Release .wasm without reference types and multi-value returns: wasm-bindgen then passes JS
# values through its JS-side heap and results through memory, where with them it emits an
# externref table and a shim per fallible export (about 1.3 kB gzip more, glue included).
RF_SIZE_RUSTFLAGS="${RF_SIZE_RUSTFLAGS} -Ctarget-feature=-reference-types,-multivalue"

# wasm-opt's flags for every release .wasm (build-pkg.sh and size-report.mjs): the features the
# Rust build emits (see above), -Oz twice (the second pass still finds about 0.2 kB), and
# --low-memory-unused (-0.3 kB gzip: constant offsets fold into loads and stores). That
# assumption holds for Rust's wasm32: the linker puts the stack first, below the data at 1 MiB,
# so the lowest kilobyte is reached only by a stack about to overflow. Inlining (sizes in
# binaryen's expression count): a function with one caller only up to 30 (-ocimfs; 20 and
# unbounded are about 0.1 kB bigger), any function up to 4 (-aimfs; default 2). Between the -Oz
# passes, the control flow flattened and rebuilt twice (--flatten --rereloop, each followed by
# -Oz: about 0.33 kB gzip less on the client; once 0.22 kB, three times 0.26 kB).
RF_WASM_OPT_FLAGS=(--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --low-memory-unused -ocimfs 30 -aimfs 4
  -Oz --flatten --rereloop -Oz --flatten --rereloop -Oz -Oz -Oz)

rf_say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
rf_die() { printf '\033[31mERROR: %s\033[0m\n' "$*" >&2; exit 1; }

# The wasm-bindgen version Cargo.lock pins (the CLI must match it exactly).
rf_wasm_bindgen_version() {
  awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$RF_ROOT/Cargo.lock"
}

# PostgreSQL's server programs (initdb, pg_ctl, postgres): Debian keeps them off PATH, in
# /usr/lib/postgresql/<major>/bin. Prints the directory that has them (the highest version that
# has both initdb and pg_ctl: a client-only package leaves a bin/ without them; else the one of
# pg_ctl on PATH, for other systems), or fails.
rf_pg_bin() {
  local dir
  for dir in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -t/ -k5,5nr || true); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then printf '%s\n' "$dir"; return 0; fi
  done
  dir=$(command -v pg_ctl 2>/dev/null || true)
  dir=${dir%/*}
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then printf '%s\n' "$dir"; return 0; fi
  return 1
}
