#!/usr/bin/env bash
# The benchmarks, one after the other (`make bench` builds pkg/ first; this script assumes it
# was built). Installs bench/'s own devDependencies when bench/node_modules is missing.
#   1. overhead: success-path throughput of retry-fetch and its peers vs plain fetch
#      (bench/overhead.mjs, about 1.5 minutes, the libraries' own cost with fetch stubbed included);
#      then the keyed POST, retry-fetch's own key vs a hand-keyed plain fetch (bench/keyed-post.mjs);
#   2. server companion: per-request cost of idempotency(handler, { store }) with MemoryStore,
#      RedisStore and PostgresStore vs the bare handler (bench/companion.mjs, about 1 minute),
#      against a throwaway redis-server and PostgreSQL cluster (scripts/services.sh); then the
#      framework adapters: retry-fetch/express, /fastify, /hono and the fetch handler pair, each
#      vs the same route in the bare framework (bench/adapters.mjs, MemoryStore, about 1 minute);
#   3. cold start and size: fresh `node` processes timing `import('retry-fetch')` and the wasm
#      compile + instantiate; gzip sizes of the client entry and the peers (bench/coldstart.mjs);
#   4. storms: retry-fetch vs ky, p-retry, fetch-retry, cockatiel against a local overloaded
#      server and a dead one (bench/storms.mjs; ROUNDS=1 for a quick look, 3 by default),
#      then the chart of its results (bench/results/storms.svg); then the same herds of
#      independent clients, each with its own copy of the package, as separate browsers
#      (bench/independent.mjs, about 3 minutes);
#   5. the simulations (Cargo examples, virtual time): the OCC experiment
#      (bench/occ_simulation.rs -> bench/results/occ.md) and the storms against the four
#      overload kinds (bench/storm_simulation.rs -> bench/results/storm-simulation.md);
#   6. the report: BENCHMARKS.md from bench/results/ (bench/report.mjs, reruns nothing).
# Results: markdown on stdout, bench/results/*.json, storms.svg, occ.md, and BENCHMARKS.md.
# About 12 to 13 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
# start_redis / start_postgres (and an EXIT trap that stops them if this script dies first).
source "$RF_ROOT/scripts/services.sh"
cd "$RF_ROOT"

[ -f pkg/package.json ] || rf_die "pkg/ is not built: run 'make pkg' (or 'make bench')"

if [ ! -d bench/node_modules ]; then
  rf_say "bench: installing bench/'s devDependencies (npm ci)"
  (cd bench && npm ci --no-audit --no-fund --loglevel=error)
fi
mkdir -p bench/results

rf_say "bench: success-path overhead (about 1.5 minutes)"
node bench/overhead.mjs

rf_say "bench: the keyed POST (about 1 minute)"
node bench/keyed-post.mjs

# redis and pg are the repository's devDependencies (node_modules/ at the root, from 'make setup').
[ -d node_modules/redis ] && [ -d node_modules/pg ] \
  || rf_die "node_modules/redis or node_modules/pg is missing: run 'make setup' (npm ci at the repository root)"
rf_say "bench: server companion (about 1 minute; throwaway redis-server and PostgreSQL)"
start_redis
start_postgres
REDIS_URL="$REDIS_URL" DATABASE_URL="$DATABASE_URL" node bench/companion.mjs
stop_redis
stop_postgres

# express, fastify, hono and @hono/node-server are also root devDependencies; MemoryStore only.
[ -d node_modules/express ] && [ -d node_modules/fastify ] && [ -d node_modules/hono ] && [ -d node_modules/@hono/node-server ] \
  || rf_die "node_modules/express, fastify, hono or @hono/node-server is missing: run 'make setup' (npm ci at the repository root)"
rf_say "bench: server companion with framework adapters (about 1 minute)"
node bench/adapters.mjs

rf_say "bench: cold start and size"
node bench/coldstart.mjs

# ROUNDS is the storms' own knob (overhead: OVERHEAD_ROUNDS, OVERHEAD_REQUESTS; companion: COMPANION_ROUNDS,
# COMPANION_REQUESTS; adapters: ADAPTERS_ROUNDS, ADAPTERS_REQUESTS; cold start: COLDSTART_RUNS).
rf_say "bench: storms (herd and outage, ${ROUNDS:-3} round(s) per contender)"
node bench/storms.mjs
rf_say "bench: storms of independent clients (${INDEPENDENT_ROUNDS:-2} round(s) per contender)"
node bench/independent.mjs
node bench/chart.mjs

if grep -q '^name = "occ_simulation"' Cargo.toml 2>/dev/null; then
  rf_say "bench: OCC simulation (cargo run --release --example occ_simulation > bench/results/occ.md)"
  if cargo run --release --quiet --example occ_simulation > bench/results/occ.md.tmp; then
    mv bench/results/occ.md.tmp bench/results/occ.md
    cat bench/results/occ.md
  else
    rm -f bench/results/occ.md.tmp
    printf 'WARNING: the OCC simulation failed; bench/results/occ.md is left as it was\n' >&2
  fi
fi

rf_say "bench: storm simulation (cargo run --release --example storm_simulation > bench/results/storm-simulation.md)"
if cargo run --release --quiet --example storm_simulation > bench/results/storm-simulation.md.tmp; then
  mv bench/results/storm-simulation.md.tmp bench/results/storm-simulation.md
  cat bench/results/storm-simulation.md
else
  rm -f bench/results/storm-simulation.md.tmp
  printf 'WARNING: the storm simulation failed; bench/results/storm-simulation.md is left as it was\n' >&2
fi

rf_say "bench: report (BENCHMARKS.md)"
node bench/report.mjs
rf_say "bench: done (bench/results/, BENCHMARKS.md)"
