//! The event queue of the virtual-time simulations (`bench/occ_simulation.rs`,
//! `bench/storm_simulation.rs`, which include this file with `#[path]`, and the throttle's
//! storm tests): messages due at a time, popped earliest first, in the order they were pushed
//! among equal times. Test and simulation support: nothing in a call uses it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Event<M> {
    at: f64,
    seq: u64,
    msg: M,
}

impl<M> PartialEq for Event<M> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<M> Eq for Event<M> {}
impl<M> PartialOrd for Event<M> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<M> Ord for Event<M> {
    // Reversed: BinaryHeap is a max-heap, the earliest event comes first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

/// Messages `M` due at virtual times (ms).
pub struct Timeline<M> {
    heap: BinaryHeap<Event<M>>,
    seq: u64,
}

impl<M> Default for Timeline<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> Timeline<M> {
    /// An empty timeline.
    pub fn new() -> Self {
        Timeline {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// `msg` is due at `at`.
    pub fn push(&mut self, at: f64, msg: M) {
        self.seq += 1;
        self.heap.push(Event {
            at,
            seq: self.seq,
            msg,
        });
    }

    /// The earliest message and its time.
    pub fn pop(&mut self) -> Option<(f64, M)> {
        self.heap.pop().map(|e| (e.at, e.msg))
    }
}
