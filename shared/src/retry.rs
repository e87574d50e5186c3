//! Bounded retries with exponential backoff and full jitter, for contention (optimistic
//! concurrency, transaction conflicts) in the writer and the consumer helpers.
//!
//! The exponential schedule comes from `backon` (`base * 2^n`, capped at `max_delay`). backon's own
//! jitter adds a random `[0, d)` on top of each delay, giving `[d, 2d)`: contending callers still
//! wake up close together. Full jitter (AWS Architecture Blog, "Exponential Backoff and Jitter")
//! sleeps a uniform `[0, d]` instead, which spreads them out the most, so [`FullJitter`] draws each
//! delay below backon's un-jittered one.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::ConfigError;

/// Most retries a policy may allow; beyond this a caller is better served by an error.
pub const MAX_RETRIES: u32 = 1_000;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: one attempt only).
    pub max_retries: u32,
    /// Cap of the first delay; doubles per retry.
    pub base_delay: Duration,
    /// Cap of any delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 10 retries from 20 ms, capped at 1 s: enough for a handful of writers contending on one item.
    fn default() -> Self {
        Self {
            max_retries: 10,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// # Errors
    /// [`ConfigError`] naming `setting` when the bounds are inconsistent.
    pub fn validate(&self, setting: &'static str) -> Result<(), ConfigError> {
        if self.max_retries > MAX_RETRIES {
            return Err(ConfigError::OutOfRange {
                setting,
                detail: format!(
                    "max retries must be at most {MAX_RETRIES}, got {}",
                    self.max_retries
                ),
            });
        }
        if self.base_delay > self.max_delay {
            return Err(ConfigError::OutOfRange {
                setting,
                detail: format!(
                    "base delay {:?} is longer than the max delay {:?}",
                    self.base_delay, self.max_delay
                ),
            });
        }
        Ok(())
    }

    /// The exponential schedule without jitter: `max_retries` delays.
    pub fn exponential_delays(&self) -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_factor(2.0)
            .with_min_delay(self.base_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(usize::try_from(self.max_retries).unwrap_or(usize::MAX))
            .build()
    }

    /// The delays to sleep between attempts: full jitter over [`Self::exponential_delays`].
    pub fn delays(&self) -> FullJitter {
        FullJitter {
            inner: self.exponential_delays(),
            rng: SmallRng::from_os_rng(),
        }
    }
}

/// Exponential backoff with full jitter; also a [`backon::Backoff`].
#[derive(Debug)]
pub struct FullJitter {
    inner: ExponentialBackoff,
    rng: SmallRng,
}

impl Iterator for FullJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let cap = self.inner.next()?;
        Some(full_jitter(cap, self.rng.random::<f64>()))
    }
}

impl BackoffBuilder for RetryPolicy {
    type Backoff = FullJitter;

    fn build(self) -> FullJitter {
        self.delays()
    }
}

/// Full jitter: `cap * unit`, for a uniform `unit` in `[0, 1]` (clamped).
pub fn full_jitter(cap: Duration, unit: f64) -> Duration {
    cap.mul_f64(unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        }
    }

    #[test]
    fn schedule_doubles_up_to_the_cap_and_stops_at_the_bound() {
        // backon multiplies in f32: compare at millisecond precision.
        let millis: Vec<u128> = policy(5)
            .exponential_delays()
            .map(|d| (d + Duration::from_micros(500)).as_millis())
            .collect();
        assert_eq!(millis, vec![10, 20, 40, 50, 50]);
        assert_eq!(policy(0).delays().count(), 0);
    }

    #[test]
    fn jittered_delays_stay_within_zero_and_the_schedule() {
        for _ in 0..100 {
            for (jittered, cap) in policy(5).delays().zip(policy(5).exponential_delays()) {
                assert!(jittered <= cap, "{jittered:?} > {cap:?}");
            }
        }
    }

    #[test]
    fn jitter_reaches_below_half_the_cap() {
        // Full jitter, not backon's "delay plus up to one more delay": some draws fall under half
        // the cap (the chance that none of 200 does is 2^-200).
        let low = (0..200)
            .filter_map(|_| policy(1).delays().next())
            .filter(|d| *d < Duration::from_millis(5))
            .count();
        assert!(low > 0);
    }

    #[test]
    fn full_jitter_spans_the_whole_range() {
        let cap = Duration::from_millis(100);
        assert_eq!(full_jitter(cap, 0.0), Duration::ZERO);
        assert_eq!(full_jitter(cap, 0.5), Duration::from_millis(50));
        assert_eq!(full_jitter(cap, 1.0), cap);
        assert_eq!(full_jitter(cap, 7.0), cap);
    }

    #[test]
    fn rejects_inconsistent_bounds_naming_the_setting() {
        let mut p = policy(1);
        p.base_delay = Duration::from_secs(1);
        let err = p.validate("update retry").unwrap_err().to_string();
        assert!(err.starts_with("update retry base delay"), "{err}");
        assert!(policy(MAX_RETRIES + 1).validate("update retry").is_err());
    }
}
