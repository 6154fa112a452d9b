#!/usr/bin/env bash
# The lint gates (`scripts/test.sh lint`, first in `make test`). Any finding fails the gate:
#   fmt     cargo fmt --check
#   clippy  cargo clippy -D warnings on every feature combination Cargo.toml promises (none,
#           client, server, client+server): natively with --all-targets (lib, tests, examples),
#           and the lib for wasm32-unknown-unknown (rustup's target, or Debian's Rust with
#           -Zbuild-std and Debian's clippy: see toolchain.sh)
#   doc     RUSTDOCFLAGS="-D warnings" cargo doc --no-deps, the same combinations and targets
#   msrv    Cargo.toml's `rust-version`, if it declares one, built with that rustup toolchain
# Every gate runs, each prints one PASS/FAIL line, and the script fails if any gate did.
# `scripts/lint.sh clippy doc` runs some gates only.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

gates=("$@")
[ ${#gates[@]} -gt 0 ] || gates=(fmt clippy doc msrv)

combos=(none client server client+server)
feature_args() { # combination -> cargo arguments
  case "$1" in
    none) echo --no-default-features ;;
    *) echo --no-default-features --features "${1/+/,}" ;;
  esac
}

# The wasm32 checks have a target dir of their own: another compiler (Debian's) and a std built
# in check mode, which the test and package builds do not share.
WASM_DIR=target/lint-wasm
wasm=(--target wasm32-unknown-unknown "${RF_BUILD_STD[@]}")

failed=()
gate() { # name, command...: runs it, prints the gate's PASS/FAIL line
  local name=$1 start=$SECONDS
  shift
  if "$@"; then
    printf '\033[32mlint: PASS %s\033[0m (%ss)\n' "$name" $((SECONDS - start))
  else
    printf '\033[31mlint: FAIL %s\033[0m (%ss)\n' "$name" $((SECONDS - start))
    failed+=("$name")
  fi
}

for g in "${gates[@]}"; do
  case "$g" in
    fmt)
      rf_say "lint: cargo fmt --check"
      gate "fmt (cargo fmt --check)" cargo fmt --check
      ;;
    clippy)
      if [ "$RF_WASM_MODE" = debian ] && [ ! -x /usr/bin/cargo-clippy ]; then
        rf_die "Debian's clippy is missing (package rust-web-clippy): run 'make setup'"
      fi
      for c in "${combos[@]}"; do
        # shellcheck disable=SC2046 # feature_args is split on purpose
        set -- $(feature_args "$c")
        rf_say "lint: cargo clippy --all-targets $* -D warnings (native)"
        gate "clippy native $c" cargo clippy --quiet --all-targets "$@" -- -D warnings
      done
      for c in "${combos[@]}"; do
        # shellcheck disable=SC2046
        set -- $(feature_args "$c")
        rf_say "lint: cargo clippy --lib $* -D warnings (wasm32, $RF_WASM_MODE)"
        gate "clippy wasm32 $c" env CARGO_TARGET_DIR=$WASM_DIR \
          "${RF_WASM_CLIPPY[@]}" --quiet --lib "${wasm[@]}" "$@" -- -D warnings
      done
      ;;
    doc)
      for c in "${combos[@]}"; do
        # shellcheck disable=SC2046
        set -- $(feature_args "$c")
        rf_say "lint: cargo doc --no-deps $* with RUSTDOCFLAGS=-D warnings (native)"
        gate "doc native $c" env RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps "$@"
        rf_say "lint: cargo doc --no-deps $* with RUSTDOCFLAGS=-D warnings (wasm32, $RF_WASM_MODE)"
        gate "doc wasm32 $c" env RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=$WASM_DIR \
          "${RF_WASM_CARGO[@]}" doc --quiet --no-deps "${wasm[@]}" "$@"
      done
      ;;
    msrv)
      # A rust-version is a promise: checked with that very toolchain, or not declared. (1.81
      # was declared once, unchecked: no 1.81 toolchain can be installed here and the
      # dev-dependencies need 1.88 (proptest), so Cargo.toml now declares none.)
      msrv=$(awk -F'"' '/^rust-version *=/ { print $2; exit }' Cargo.toml)
      if [ -z "$msrv" ]; then
        printf 'lint: SKIP msrv (Cargo.toml declares no rust-version)\n'
      elif command -v rustup >/dev/null 2>&1 && rustup run "$msrv" cargo --version >/dev/null 2>&1; then
        for c in "${combos[@]}"; do
          # shellcheck disable=SC2046
          set -- $(feature_args "$c")
          rf_say "lint: cargo +$msrv check --all-targets $* (rust-version $msrv)"
          gate "msrv $msrv $c" env CARGO_TARGET_DIR=target/lint-msrv \
            rustup run "$msrv" cargo check --quiet --all-targets "$@"
        done
      else
        gate "msrv (rust-version $msrv: no toolchain $msrv installed to check it)" false
      fi
      ;;
    *) rf_die "unknown lint gate: $g (fmt, clippy, doc, msrv)" ;;
  esac
done

if [ ${#failed[@]} -gt 0 ]; then
  rf_die "lint: ${#failed[@]} gate(s) failed: ${failed[*]}"
fi
rf_say "lint: all gates passed: ${gates[*]}"
