//! Virtual-time re-run of the optimistic-concurrency (OCC) experiment from Marc Brooker,
//! "Exponential Backoff And Jitter", AWS Architecture Blog (March 2015), driven by this crate's
//! own [`Backoff`] and [`SplitMix64`], so it measures our real jitter code.
//!
//! Run: `cargo run --release --example occ_simulation`
//! Test: `cargo test --example occ_simulation`
//!
//! # The model, rule by rule, from the post's simulator
//!
//! The simulator is `src/backoff_simulator.py` in `aws-samples/aws-arch-backoff-simulator`
//! (Python, not Java; the repository moved from `awslabs`). It is a discrete-event simulation
//! over a priority queue of messages:
//!
//! - `Net(10, 2)`: every message hop takes `abs(normal(mean 10 ms, sd 2 ms))` (the post: "mean
//!   of 10ms and variance of 4ms").
//! - `OccServer` holds one row with one version number. `read` replies with the version; `write`
//!   carrying version `v` succeeds (and bumps the version) iff `v` is still current. Every
//!   `write` counts one call (`stats.calls`); reads are not counted.
//! - `OccClient` updates the row exactly once: at time 0 it sends a read (one hop), the server
//!   replies (one hop), it sends a write with the version it read (one hop), the server replies
//!   (one hop). On failure it increments `attempt` and sends a new read after
//!   `net.delay() + backoff.backoff(attempt)`; on success it stops.
//! - Every client gets `backoff_cls(5, 2000)`: base 5 ms, cap 2000 ms, both in milliseconds.
//! - The result of a run is the time of the last event (the last client learning its write
//!   succeeded) and the number of write calls, each averaged over 100 runs.
//!
//! # Mapping the original's backoff classes onto our `Backoff`
//!
//! The original's `expo(n) = min(cap, 2^n * base)` is called with `n = attempt >= 1`, so its
//! first sleep is `2 * base = 10 ms` (10, 20, 40, ..., 1280, 2000). Our schedule is
//! `min(cap, base * factor^(retry-1))`, whose first delay is the base. To run the original's
//! schedule through our code unchanged, the exponential modes (none, full, equal, additive) use
//! `base_delay_ms = 10` (= 2 x 5), which makes the two sequences identical. Decorrelated jitter
//! in the original is `sleep = min(cap, uniform(base, 3 * sleep))` starting from `sleep = base`,
//! exactly ours with `base_delay_ms = 5`. A second table runs every mode with the literal
//! `base_delay_ms = 5` (our schedule's first retry then waits at most 5 ms, not 10).
//!
//! | ours           | original class           |
//! |----------------|--------------------------|
//! | `none`         | `ExpoBackoff` ("Exponential") |
//! | `full`         | `ExpoBackoffFullJitter`  |
//! | `equal`        | `ExpoBackoffEqualJitter` |
//! | `decorrelated` | `ExpoBackoffDecorr`      |
//! | `additive`     | (not in the post)        |
//! | base 0         | `NoBackoff` ("None"), reference row |
//!
//! Other differences, all small: our `Backoff` floors each delay to whole milliseconds (the
//! original sleeps fractional ms); randomness comes from one seeded `SplitMix64` stream per run
//! (network delays and jitter alike, as the original shares Python's global `random`), normal
//! samples by Box-Muller; simultaneous events (which essentially never happen with continuous
//! delays) are ordered by insertion.

use retry_fetch::core::backoff::{Backoff, Rng, SplitMix64};
use retry_fetch::core::options::{Jitter, RetryPolicy, MAX_ATTEMPTS_LIMIT};

#[path = "../src/core/timeline.rs"]
mod timeline;

mod occ {
    use super::*;
    use crate::timeline::Timeline;

    /// `backoff_cls(5, 2000)` in the original: base and cap, in ms.
    pub const BASE_MS: f64 = 5.0;
    pub const CAP_MS: f64 = 2000.0;
    /// `Net(10, 2)`: one network hop is `abs(normal(10, 2))` ms.
    pub const NET_MEAN_MS: f64 = 10.0;
    pub const NET_SD_MS: f64 = 2.0;

    /// What a client does after a failed write.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Strategy {
        /// The original's `NoBackoff`: retry at once (our `Backoff` with a zero base).
        NoBackoff,
        /// Capped exponential backoff with one of our jitter modes.
        Jitter(Jitter),
    }

    /// How the original's `base = 5` maps onto our `base_delay_ms`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum BaseMapping {
        /// Same schedule as the original: exponential modes use 10 ms (its first sleep is
        /// `2^1 * 5`), decorrelated uses 5 ms.
        Original,
        /// `base_delay_ms = 5` for every mode.
        Literal,
    }

    /// The policy a client's `Backoff` is built from. `max_attempts` is irrelevant: `Backoff`
    /// never reads it, and the simulated clients retry until they succeed.
    pub fn policy(strategy: Strategy, mapping: BaseMapping) -> RetryPolicy {
        let (jitter, base) = match strategy {
            Strategy::NoBackoff => (Jitter::None, 0.0),
            Strategy::Jitter(Jitter::Decorrelated) => (Jitter::Decorrelated, BASE_MS),
            Strategy::Jitter(j) => match mapping {
                BaseMapping::Original => (j, 2.0 * BASE_MS),
                BaseMapping::Literal => (j, BASE_MS),
            },
        };
        RetryPolicy {
            max_attempts: MAX_ATTEMPTS_LIMIT,
            base_delay_ms: base,
            factor: 2.0,
            max_delay_ms: CAP_MS,
            jitter,
            ..RetryPolicy::default()
        }
    }

    /// One hop of network delay: `abs(normal(mean, sd))`, normal by Box-Muller.
    fn net_delay(rng: &mut SplitMix64) -> f64 {
        let u1 = 1.0 - rng.next_f64(); // (0, 1]
        let u2 = rng.next_f64();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (NET_MEAN_MS + NET_SD_MS * z).abs()
    }

    /// The messages of the original: requests to the server and replies to a client.
    #[derive(Clone, Copy, Debug)]
    enum Msg {
        /// `server.read`, from client `c`.
        Read { c: usize },
        /// `client.read_rsp`: the version the server holds.
        ReadRsp { c: usize, version: u64 },
        /// `server.write` with the version the client read.
        Write { c: usize, version: u64 },
        /// `client.write_rsp`: whether the write won.
        WriteRsp { c: usize, ok: bool },
    }

    /// The outcome of one run.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Run {
        /// Write calls the server handled (the original's `stats.calls`).
        pub calls: u64,
        /// Writes that lost the race.
        pub failures: u64,
        /// Virtual time of the last event, in ms (what `run_sim` returns).
        pub completion_ms: f64,
    }

    /// One run: `clients` clients each update the row once, retrying until they succeed.
    pub fn simulate(clients: usize, strategy: Strategy, mapping: BaseMapping, seed: u64) -> Run {
        let policy = policy(strategy, mapping);
        let mut rng = SplitMix64::new(seed);
        let mut backoffs: Vec<Backoff> = (0..clients).map(|_| Backoff::new(&policy)).collect();
        let mut queue = Timeline::new();
        for c in 0..clients {
            let at = net_delay(&mut rng);
            queue.push(at, Msg::Read { c });
        }
        let mut version = 0u64;
        let mut run = Run {
            calls: 0,
            failures: 0,
            completion_ms: 0.0,
        };
        let mut now = 0.0f64;
        let mut done = 0usize;
        while let Some((at, msg)) = queue.pop() {
            debug_assert!(at >= now, "time must move forward");
            now = at;
            match msg {
                Msg::Read { c } => {
                    let at = now + net_delay(&mut rng);
                    queue.push(at, Msg::ReadRsp { c, version });
                }
                Msg::ReadRsp { c, version: v } => {
                    let at = now + net_delay(&mut rng);
                    queue.push(at, Msg::Write { c, version: v });
                }
                Msg::Write { c, version: v } => {
                    run.calls += 1;
                    let ok = v == version;
                    if ok {
                        version += 1;
                    } else {
                        run.failures += 1;
                    }
                    let at = now + net_delay(&mut rng);
                    queue.push(at, Msg::WriteRsp { c, ok });
                }
                Msg::WriteRsp { c, ok } => {
                    if ok {
                        done += 1;
                    } else {
                        // Same draw order as the original: network delay, then backoff.
                        let net = net_delay(&mut rng);
                        let sleep = backoffs[c].next_delay(&mut rng) as f64;
                        queue.push(now + net + sleep, Msg::Read { c });
                    }
                }
            }
        }
        assert_eq!(done, clients, "every client finishes");
        assert_eq!(version, clients as u64, "one successful write per client");
        run.completion_ms = now;
        run
    }

    /// Means over `runs` seeds.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Summary {
        pub calls: f64,
        pub calls_sd: f64,
        pub completion_ms: f64,
        pub completion_sd: f64,
    }

    /// The seed of run `i` for `clients` clients; the same for every strategy (common random
    /// numbers make the comparison between modes less noisy).
    pub fn seed(base_seed: u64, clients: usize, i: u64) -> u64 {
        base_seed ^ ((clients as u64) << 32) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    pub fn average(
        clients: usize,
        strategy: Strategy,
        mapping: BaseMapping,
        base_seed: u64,
        runs: u64,
    ) -> Summary {
        let results: Vec<Run> = (0..runs)
            .map(|i| simulate(clients, strategy, mapping, seed(base_seed, clients, i)))
            .collect();
        let n = runs as f64;
        let mean = |f: &dyn Fn(&Run) -> f64| results.iter().map(f).sum::<f64>() / n;
        let sd = |f: &dyn Fn(&Run) -> f64, m: f64| {
            (results.iter().map(|r| (f(r) - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt()
        };
        let calls = mean(&|r| r.calls as f64);
        let completion_ms = mean(&|r| r.completion_ms);
        Summary {
            calls,
            calls_sd: sd(&|r| r.calls as f64, calls),
            completion_ms,
            completion_sd: sd(&|r| r.completion_ms, completion_ms),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const MODES: [Jitter; 5] = [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
            Jitter::Additive,
        ];

        #[test]
        fn one_client_succeeds_in_one_call() {
            for mapping in [BaseMapping::Original, BaseMapping::Literal] {
                for strategy in MODES
                    .map(Strategy::Jitter)
                    .into_iter()
                    .chain([Strategy::NoBackoff])
                {
                    for s in 0..20 {
                        let run = simulate(1, strategy, mapping, s);
                        assert_eq!((run.calls, run.failures), (1, 0), "{strategy:?}");
                        // Four hops of about 10 ms each.
                        assert!(
                            run.completion_ms > 10.0 && run.completion_ms < 80.0,
                            "{run:?}"
                        );
                    }
                }
            }
        }

        #[test]
        fn every_client_wins_exactly_once() {
            for strategy in MODES
                .map(Strategy::Jitter)
                .into_iter()
                .chain([Strategy::NoBackoff])
            {
                let run = simulate(20, strategy, BaseMapping::Original, 7);
                assert_eq!(run.calls - run.failures, 20, "{strategy:?}");
            }
        }

        #[test]
        fn full_jitter_does_less_work_than_no_jitter_at_100_clients() {
            let none = average(
                100,
                Strategy::Jitter(Jitter::None),
                BaseMapping::Original,
                1,
                10,
            );
            let full = average(
                100,
                Strategy::Jitter(Jitter::Full),
                BaseMapping::Original,
                1,
                10,
            );
            assert!(full.calls < none.calls, "full {full:?} none {none:?}");
            assert!(
                full.completion_ms < none.completion_ms,
                "full {full:?} none {none:?}"
            );
            // No backoff at all is the N^2 case: far more work than either.
            let zero = average(100, Strategy::NoBackoff, BaseMapping::Original, 1, 10);
            assert!(zero.calls > none.calls, "no backoff {zero:?} none {none:?}");
        }

        #[test]
        fn the_schedule_matches_the_original_expo() {
            // expo(n) = min(2000, 2^n * 5) for n = 1, 2, ...
            let mut b = Backoff::new(&policy(
                Strategy::Jitter(Jitter::None),
                BaseMapping::Original,
            ));
            let mut rng = SplitMix64::new(0);
            let got: Vec<u64> = (0..10).map(|_| b.next_delay(&mut rng)).collect();
            assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1280, 2000, 2000]);
            let mut b = Backoff::new(&policy(Strategy::NoBackoff, BaseMapping::Original));
            assert!((0..10).all(|_| b.next_delay(&mut rng) == 0));
        }

        #[test]
        fn same_seed_same_result() {
            for strategy in MODES.map(Strategy::Jitter) {
                let a = simulate(50, strategy, BaseMapping::Original, 42);
                let b = simulate(50, strategy, BaseMapping::Original, 42);
                assert_eq!(a, b);
                let c = simulate(50, strategy, BaseMapping::Original, 43);
                assert_ne!(a, c);
            }
        }
    }
}

use occ::{average, BaseMapping, Strategy, Summary};

/// Runs per (mode, N); the original averages over 100.
const RUNS: u64 = 100;
const BASE_SEED: u64 = 2015;
const CLIENTS: [usize; 3] = [10, 50, 100];

fn name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::NoBackoff => "(no backoff)",
        Strategy::Jitter(Jitter::None) => "none",
        Strategy::Jitter(Jitter::Full) => "full",
        Strategy::Jitter(Jitter::Equal) => "equal",
        Strategy::Jitter(Jitter::Decorrelated) => "decorrelated",
        Strategy::Jitter(Jitter::Additive) => "additive",
    }
}

fn original(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::NoBackoff => "NoBackoff",
        Strategy::Jitter(Jitter::None) => "ExpoBackoff",
        Strategy::Jitter(Jitter::Full) => "ExpoBackoffFullJitter",
        Strategy::Jitter(Jitter::Equal) => "ExpoBackoffEqualJitter",
        Strategy::Jitter(Jitter::Decorrelated) => "ExpoBackoffDecorr",
        Strategy::Jitter(Jitter::Additive) => "-",
    }
}

/// What the post says for this mode. The post reports its results only as charts (calls and
/// completion time against the number of clients); its text gives the qualitative statements
/// quoted here. Quotes marked `post` were checked against copies of the post's text; `post*`
/// is the wording of the post's conclusion as recalled, not re-checked here. The two N = 100
/// numbers marked `target` are the figures this simulation was built to reproduce (about 1860
/// calls and 63 s without jitter, about 800 calls and 4.9 s with full jitter); they do not
/// appear in the post's text.
fn published(strategy: Strategy, clients: usize) -> &'static str {
    match (strategy, clients) {
        (Strategy::NoBackoff, _) => "post: work \"increases with N^2\"",
        (Strategy::Jitter(Jitter::None), 100) => {
            "target: ~1860 calls, ~63 s; post: \"client work has only been reduced slightly\""
        }
        (Strategy::Jitter(Jitter::None), _) => {
            "post: \"client work has only been reduced slightly\""
        }
        (Strategy::Jitter(Jitter::Full), 100) => {
            "target: ~800 calls, ~4.9 s; post*: less work than decorrelated, slightly more time"
        }
        (Strategy::Jitter(Jitter::Full), _) => {
            "post*: less work than decorrelated, slightly more time"
        }
        (Strategy::Jitter(Jitter::Equal), _) => {
            "post: \"slightly more work than Full Jitter, and takes much longer\""
        }
        (Strategy::Jitter(Jitter::Decorrelated), _) => {
            "post*: more calls than full and equal, slightly less time than full"
        }
        (Strategy::Jitter(Jitter::Additive), _) => "not in the post",
    }
}

fn table(mapping: BaseMapping, with_published: bool) {
    let strategies = [
        Strategy::Jitter(Jitter::None),
        Strategy::Jitter(Jitter::Full),
        Strategy::Jitter(Jitter::Equal),
        Strategy::Jitter(Jitter::Decorrelated),
        Strategy::Jitter(Jitter::Additive),
        Strategy::NoBackoff,
    ];
    if with_published {
        println!("| mode | original class | N | calls (mean ± sd) | completion time (mean ± sd) | published figure |");
        println!("|---|---|---:|---:|---:|---|");
    } else {
        println!("| mode | N | calls (mean ± sd) | completion time (mean ± sd) |");
        println!("|---|---:|---:|---:|");
    }
    for &strategy in &strategies {
        // Decorrelated and no-backoff do not depend on the mapping: shown once.
        let mapping_matters = !matches!(
            strategy,
            Strategy::NoBackoff | Strategy::Jitter(Jitter::Decorrelated)
        );
        if !with_published && !mapping_matters {
            continue;
        }
        for &clients in &CLIENTS {
            let Summary {
                calls,
                calls_sd,
                completion_ms,
                completion_sd,
            } = average(clients, strategy, mapping, BASE_SEED, RUNS);
            let time = format!(
                "{:.2} s ± {:.2}",
                completion_ms / 1000.0,
                completion_sd / 1000.0
            );
            let calls = format!("{calls:.0} ± {calls_sd:.0}");
            if with_published {
                println!(
                    "| {} | {} | {clients} | {calls} | {time} | {} |",
                    name(strategy),
                    original(strategy),
                    published(strategy, clients)
                );
            } else {
                println!("| {} | {clients} | {calls} | {time} |", name(strategy));
            }
        }
    }
}

fn main() {
    let started = std::time::Instant::now();
    println!("# OCC contention, virtual time (Brooker 2015, aws-arch-backoff-simulator model)");
    println!();
    println!(
        "Network hop abs(N({}, {})) ms; base {} ms, cap {} ms, factor 2; calls = write calls; \
         completion = time of the last event; mean over {RUNS} seeded runs (SplitMix64, base seed {BASE_SEED}).",
        occ::NET_MEAN_MS,
        occ::NET_SD_MS,
        occ::BASE_MS,
        occ::CAP_MS
    );
    println!();
    println!("## Schedule as in the original (expo(n) = min(2000, 5 * 2^n), n >= 1: base_delay_ms = 10; decorrelated base 5)");
    println!();
    table(BaseMapping::Original, true);
    println!();
    println!(
        "`post`: quoted from the post's text; `post*`: the post's conclusion as recalled (not \
         re-checked); `target`: the figures this simulation was built to reproduce, absent from the post's text (the post \
         shows its results as charts only)."
    );
    println!();
    println!(
        "## Literal base_delay_ms = 5 for every mode (first retry waits up to 5 ms instead of 10)"
    );
    println!();
    table(BaseMapping::Literal, false);
    println!();
    println!(
        "(computed in {:.1} s of wall time)",
        started.elapsed().as_secs_f64()
    );
}
