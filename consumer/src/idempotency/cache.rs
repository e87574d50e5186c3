//! An optional in-memory cache of completed keys, so a warm Lambda answers a duplicate without a
//! DynamoDB call. Only completed records are cached: "in progress" changes under our feet.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};

/// A completed record as the store last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedCompletion {
    pub(crate) payload_hash: String,
    pub(crate) response: String,
    /// After this the record no longer holds its key, so neither does the cache entry.
    pub(crate) expiry: DateTime<Utc>,
}

/// Bounded, first-in-first-out: completed keys are looked up soon after they complete (retries
/// and duplicate deliveries arrive within minutes), so recency of insertion is what matters.
#[derive(Debug)]
pub(crate) struct CompletedCache {
    capacity: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, CachedCompletion>,
    order: VecDeque<String>,
}

impl CompletedCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::default(),
        }
    }

    pub(crate) fn get(&self, key: &str, now: DateTime<Utc>) -> Option<CachedCompletion> {
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match entries.by_key.get(key) {
            Some(hit) if hit.expiry >= now => Some(hit.clone()),
            Some(_) => {
                entries.by_key.remove(key);
                entries.order.retain(|k| k != key);
                None
            }
            None => None,
        }
    }

    pub(crate) fn insert(&self, key: &str, completion: CachedCompletion) {
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.by_key.insert(key.to_owned(), completion).is_none() {
            entries.order.push_back(key.to_owned());
        }
        while entries.by_key.len() > self.capacity {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            entries.by_key.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(expiry: DateTime<Utc>) -> CachedCompletion {
        CachedCompletion {
            payload_hash: "h".into(),
            response: "{}".into(),
            expiry,
        }
    }

    #[test]
    fn evicts_the_oldest_entry_beyond_capacity() {
        let now = Utc::now();
        let later = now + chrono::Duration::hours(1);
        let cache = CompletedCache::new(2);
        cache.insert("a", completion(later));
        cache.insert("b", completion(later));
        cache.insert("c", completion(later));
        assert!(cache.get("a", now).is_none());
        assert!(cache.get("b", now).is_some());
        assert!(cache.get("c", now).is_some());
    }

    #[test]
    fn expired_entries_miss() {
        let now = Utc::now();
        let cache = CompletedCache::new(4);
        cache.insert("a", completion(now - chrono::Duration::seconds(1)));
        assert!(cache.get("a", now).is_none());
    }
}
