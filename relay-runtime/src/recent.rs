//! A short memory of the events a relay process has settled: a set of keys that forgets each one
//! a fixed time after it was last remembered, and its oldest ones first when it is full.
//!
//! Both relays use it to skip what they already published when AWS hands it to them again: the
//! poller remembers what it marked while the eventually consistent index may still serve it, the
//! stream relay what it published while Lambda may re-deliver its batch. Forgetting is always
//! safe: a forgotten event that comes back is published again (a duplicate, never a loss), so
//! both bounds only trade memory for duplicates.
//!
//! One fixed time to live for every key makes the insertion order the expiry order, so a queue
//! beside the set is all the bookkeeping (no timer wheel, no background task). A TTL cache crate
//! such as `moka` does the same with per-entry expiry, concurrent shards and eviction policies
//! this does not need, and would add a dozen crates to the Lambda's size-tuned binary.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Keys remembered for `ttl` after they were last remembered, at most `capacity` of them. Shared
/// by the tasks of one process (a lock held for a few hash operations).
#[derive(Debug)]
pub struct RecentKeys<K> {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Window<K>>,
}

#[derive(Debug)]
struct Window<K> {
    /// The number of each key's last remembering.
    at: HashMap<K, u64>,
    /// (when, number, key) in the order they were remembered; a key remembered again has an
    /// older entry here that no longer counts (its number differs from `at`'s).
    order: VecDeque<(Instant, u64, K)>,
    /// Rememberings so far.
    count: u64,
}

impl<K: Clone + Eq + Hash> RecentKeys<K> {
    /// Remembers keys for `ttl`, at most `capacity` at once (0: remembers nothing).
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            inner: Mutex::new(Window {
                at: HashMap::new(),
                order: VecDeque::new(),
                count: 0,
            }),
        }
    }

    /// How long a key is remembered.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Remembers `keys` from now on; the oldest are forgotten when more than the capacity are.
    pub fn remember(&self, keys: impl IntoIterator<Item = K>) {
        if self.ttl.is_zero() || self.capacity == 0 {
            return;
        }
        let now = Instant::now();
        let mut window = self.inner.lock().expect("not poisoned");
        window.expire(now, self.ttl);
        for key in keys {
            window.count += 1;
            let number = window.count;
            window.at.insert(key.clone(), number);
            window.order.push_back((now, number, key));
        }
        while window.at.len() > self.capacity {
            window.pop_oldest();
        }
        // Entries of keys remembered again pile up only until they expire; bound them too.
        if window.order.len() > 2 * self.capacity {
            window.compact();
        }
    }

    /// Whether `key` was remembered less than the time to live ago.
    pub fn contains(&self, key: &K) -> bool {
        let mut window = self.inner.lock().expect("not poisoned");
        window.expire(Instant::now(), self.ttl);
        window.at.contains_key(key)
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        let mut window = self.inner.lock().expect("not poisoned");
        window.expire(Instant::now(), self.ttl);
        window.at.len()
    }

    /// Whether nothing is remembered now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Clone + Eq + Hash> Window<K> {
    /// Forgets the keys remembered `ttl` or longer before `now`.
    fn expire(&mut self, now: Instant, ttl: Duration) {
        while self
            .order
            .front()
            .is_some_and(|(at, ..)| now.saturating_duration_since(*at) >= ttl)
        {
            self.pop_oldest();
        }
    }

    /// Drops the oldest entry, and its key unless it was remembered again since.
    fn pop_oldest(&mut self) {
        if let Some((_, number, key)) = self.order.pop_front()
            && self.at.get(&key) == Some(&number)
        {
            self.at.remove(&key);
        }
    }

    /// Drops the entries of keys remembered again since.
    fn compact(&mut self) {
        let at = &self.at;
        self.order
            .retain(|(_, number, key)| at.get(key) == Some(number));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn forgets_a_key_its_time_to_live_after_it_was_last_remembered() {
        // Given keys remembered for 2 s
        let recent = RecentKeys::new(Duration::from_secs(2), 100);
        recent.remember(["a", "b"]);

        // When 1.5 s pass and `b` is remembered again
        tokio::time::sleep(Duration::from_millis(1500)).await;
        recent.remember(["b"]);

        // Then both are known until `a`'s 2 s are over, and `b` until its own are
        assert!(recent.contains(&"a") && recent.contains(&"b"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!recent.contains(&"a"));
        assert!(recent.contains(&"b"));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!recent.contains(&"b"));
        assert!(recent.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn forgets_the_oldest_keys_first_when_full() {
        // Given room for 3 keys
        let recent = RecentKeys::new(Duration::from_secs(60), 3);

        // When 4 are remembered, one after another, then the second again, then a fifth
        for key in [1, 2, 3, 4] {
            recent.remember([key]);
        }
        recent.remember([2]);
        recent.remember([5]);

        // Then the 3 remembered last are known
        assert_eq!(recent.len(), 3);
        assert!(!recent.contains(&1) && !recent.contains(&3));
        assert!(recent.contains(&4) && recent.contains(&2) && recent.contains(&5));
    }

    #[tokio::test(start_paused = true)]
    async fn remembers_nothing_without_a_time_to_live_or_room() {
        for recent in [
            RecentKeys::new(Duration::ZERO, 10),
            RecentKeys::new(Duration::from_secs(1), 0),
        ] {
            recent.remember(["a"]);
            assert!(!recent.contains(&"a"));
        }
    }
}
