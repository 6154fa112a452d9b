//! A small map from origin to per-origin state, for the budget, throttle and breaker.
//!
//! An app talks to a handful of origins, so a vector searched linearly is faster and far
//! smaller in wasm than a `HashMap` (no hasher, no random keys). It holds at most
//! [`MAX_ORIGINS`] entries, so a client that calls many hosts cannot grow it without bound;
//! past that, the entry used least recently among those **at rest** (whose dropping loses
//! nothing: a closed circuit without failures, a full budget, an idle throttle) is dropped, so
//! an open circuit or a drained budget is not forgotten because other hosts were called. Only
//! when none is at rest does the least recently used go.

/// The most origins one guard keeps state for: 256.
pub const MAX_ORIGINS: usize = 256;

/// Per-origin state: the origins, most recently used last, each with the index of its state
/// in a second list, where states never move but to fill a gap. Finding an origin, moving it
/// last and dropping one are one (non-generic) piece of code for every kind of state.
#[derive(Clone, Debug)]
pub struct OriginMap<T> {
    order: Vec<(String, usize)>,
    states: Vec<T>,
}

impl<T> Default for OriginMap<T> {
    fn default() -> Self {
        OriginMap {
            order: Vec::new(),
            states: Vec::new(),
        }
    }
}

/// Where `origin` is in `order`, and the index of its state.
#[inline(never)]
fn find(order: &[(String, usize)], origin: &str) -> Option<(usize, usize)> {
    let i = order.iter().position(|(o, _)| o == origin)?;
    order.get(i).map(|(_, s)| (i, *s))
}

/// Move entry `i` of `order` last (most recently used).
#[inline(never)]
fn touch(order: &mut Vec<(String, usize)>, i: usize) {
    if i + 1 < order.len() {
        let entry = order.remove(i);
        order.push(entry);
    }
}

/// Put `origin` last in `order`: in the place of entry `evict` (whose state slot it takes
/// over), else with a new slot, `len` (the number of states). The index of its state.
#[inline(never)]
fn place(
    order: &mut Vec<(String, usize)>,
    origin: &str,
    evict: Option<usize>,
    len: usize,
) -> usize {
    let s = match evict {
        Some(i) if i < order.len() => order.remove(i).1,
        _ => len,
    };
    order.push((origin.to_string(), s));
    s
}

/// Drop entry `i` of `order`, whose state `states.swap_remove` is about to drop: the index of
/// that state, and the entry of the last state (which moves there) renumbered.
#[inline(never)]
fn unlink(order: &mut Vec<(String, usize)>, i: usize, states: usize) -> usize {
    let (_, s) = order.remove(i);
    let last = states - 1;
    if let Some(entry) = order.iter_mut().find(|(_, at)| *at == last) {
        entry.1 = s;
    }
    s
}

impl<T> OriginMap<T> {
    /// The state of `origin`, if any.
    pub fn get(&self, origin: &str) -> Option<&T> {
        self.states.get(find(&self.order, origin)?.1)
    }

    /// The state of `origin`, created with `make` when absent (making room, if needed, by
    /// dropping the least recently used entry for which `at_rest` holds, else the least
    /// recently used); marks it most recently used.
    pub fn get_or_insert_with(
        &mut self,
        origin: &str,
        make: impl FnOnce() -> T,
        at_rest: impl Fn(&T) -> bool,
    ) -> &mut T {
        let s = match find(&self.order, origin) {
            Some((i, s)) => {
                touch(&mut self.order, i);
                s
            }
            None => {
                let states = &self.states;
                let evict = (states.len() >= MAX_ORIGINS).then(|| {
                    self.order
                        .iter()
                        .position(|(_, s)| states.get(*s).is_some_and(&at_rest))
                        .unwrap_or(0)
                });
                let s = place(&mut self.order, origin, evict, states.len());
                let made = make();
                match self.states.get_mut(s) {
                    Some(slot) => *slot = made,
                    None => self.states.push(made),
                }
                s
            }
        };
        &mut self.states[s]
    }

    /// The state of `origin` for update, if any (not reordered).
    pub fn get_mut(&mut self, origin: &str) -> Option<&mut T> {
        self.states.get_mut(find(&self.order, origin)?.1)
    }

    /// Drop the state of `origin`, if any.
    pub fn remove(&mut self, origin: &str) {
        if let Some((i, _)) = find(&self.order, origin) {
            let s = unlink(&mut self.order, i, self.states.len());
            self.states.swap_remove(s);
        }
    }

    /// How many origins have state.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// True when no origin has state.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_and_update() {
        let mut m: OriginMap<u32> = OriginMap::default();
        assert!(m.is_empty());
        *m.get_or_insert_with("a", || 1, |_| true) += 10;
        assert_eq!(m.get("a"), Some(&11));
        assert_eq!(*m.get_or_insert_with("a", || 99, |_| true), 11);
        assert_eq!(m.get("b"), None);
        if let Some(v) = m.get_mut("a") {
            *v = 5;
        }
        assert_eq!(m.get("a"), Some(&5));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn bounded_dropping_the_least_recently_used() {
        let mut m: OriginMap<usize> = OriginMap::default();
        let any = |_: &usize| true;
        for i in 0..MAX_ORIGINS {
            m.get_or_insert_with(&i.to_string(), || i, any);
        }
        m.get_or_insert_with("0", || 0, any); // touch the oldest
        m.get_or_insert_with("new", || 1000, any);
        assert_eq!(m.len(), MAX_ORIGINS);
        assert_eq!(m.get("0"), Some(&0));
        assert_eq!(m.get("1"), None, "the least recently used was dropped");
        assert_eq!(m.get("new"), Some(&1000));
    }

    #[test]
    fn bounded_dropping_the_least_recently_used_at_rest_first() {
        let mut m: OriginMap<usize> = OriginMap::default();
        let even = |v: &usize| v.is_multiple_of(2); // odd values are busy
        for i in 0..MAX_ORIGINS {
            m.get_or_insert_with(&i.to_string(), || i, even);
        }
        m.get_or_insert_with("new", || 1000, even);
        assert_eq!(m.get("1"), Some(&1), "a busy entry is kept");
        assert_eq!(
            m.get("0"),
            None,
            "the least recently used at rest was dropped"
        );
        // None at rest: the least recently used goes.
        let mut busy: OriginMap<usize> = OriginMap::default();
        for i in 0..=MAX_ORIGINS {
            busy.get_or_insert_with(&i.to_string(), || i, |_| false);
        }
        assert_eq!(busy.len(), MAX_ORIGINS);
        assert_eq!(busy.get("0"), None);
    }
}
