#!/usr/bin/env bash
# The benchmarks, one after the other (`make bench` builds pkg/ first; this script assumes it
# was built). Installs bench/'s own devDependencies when bench/node_modules is missing.
#   1. storms: retry-fetch vs ky, p-retry, fetch-retry, cockatiel against a local overloaded
#      server and a dead one (bench/storms.mjs; ROUNDS=1 for a quick look, 3 by default),
#      then the chart of its results (bench/results/storms.svg);
#   2. the OCC simulation (bench/occ_simulation.rs), when Cargo.toml declares that example.
# Results: markdown on stdout, bench/results/storms.json and storms.svg.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$RF_ROOT"

[ -f pkg/package.json ] || rf_die "pkg/ is not built: run 'make pkg' (or 'make bench')"

if [ ! -d bench/node_modules ]; then
  rf_say "bench: installing bench/'s devDependencies (npm ci)"
  (cd bench && npm ci --no-audit --no-fund --loglevel=error)
fi

rf_say "bench: storms (herd and outage, ${ROUNDS:-3} round(s) per contender)"
node bench/storms.mjs
node bench/chart.mjs

if grep -q '^name = "occ_simulation"' Cargo.toml 2>/dev/null; then
  rf_say "bench: OCC simulation (cargo run --release --example occ_simulation)"
  cargo run --release --quiet --example occ_simulation
fi
rf_say "bench: done (bench/results/)"
