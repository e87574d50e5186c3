//! Bounded retries with exponential backoff and full jitter.
//!
//! backon's own jitter adds up to one more delay on top of the exponential one (`d + rand(0, d)`);
//! under contention that keeps competing writers in step. Full jitter (`rand(0, d)`, as in the AWS
//! Architecture Blog's "Exponential Backoff And Jitter") spreads them over the whole window, so
//! [`FullJitter`] wraps backon's exponential schedule and draws each delay uniformly below it.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use outbox_shared::ConfigError;

/// Most retries a policy may ask for: past this a conflict is not contention but a bug.
pub const MAX_RETRIES_LIMIT: usize = 1_000;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; `0` tries once.
    pub max_retries: usize,
    /// Upper bound of the first retry's delay; doubles per retry.
    pub base_delay: Duration,
    /// Upper bound of any retry's delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 10 retries from 10 ms up to 1 s: enough for a few dozen writers on one item.
    fn default() -> Self {
        Self {
            max_retries: 10,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// # Errors
    /// [`ConfigError`] naming the setting that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_retries > MAX_RETRIES_LIMIT {
            return Err(ConfigError::OutOfRange {
                setting: "max retries",
                detail: format!(
                    "must be at most {MAX_RETRIES_LIMIT}, got {}",
                    self.max_retries
                ),
            });
        }
        if self.base_delay > self.max_delay {
            return Err(ConfigError::OutOfRange {
                setting: "base retry delay",
                detail: format!(
                    "{:?} is longer than the max retry delay {:?}",
                    self.base_delay, self.max_delay
                ),
            });
        }
        Ok(())
    }

    /// The delays between attempts: at most `max_retries` of them, each drawn from
    /// `[0, min(max_delay, base_delay * 2^n)]`.
    pub fn backoff(&self) -> FullJitter {
        FullJitter {
            inner: ExponentialBuilder::default()
                .with_min_delay(self.base_delay)
                .with_max_delay(self.max_delay)
                .with_max_times(self.max_retries)
                .build(),
            rng: SmallRng::from_os_rng(),
        }
    }
}

/// Exponential backoff with full jitter; a [`backon::Backoff`].
#[derive(Debug)]
pub struct FullJitter {
    inner: ExponentialBackoff,
    rng: SmallRng,
}

impl Iterator for FullJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let ceiling = self.inner.next()?;
        Some(ceiling.mul_f64(self.rng.random::<f64>()))
    }
}

impl BackoffBuilder for RetryPolicy {
    type Backoff = FullJitter;

    fn build(self) -> FullJitter {
        self.backoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_bounded_by_the_exponential_ceiling() {
        let policy = RetryPolicy {
            max_retries: 6,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
        };
        for _ in 0..50 {
            let delays: Vec<_> = policy.backoff().collect();
            assert_eq!(delays.len(), 6);
            let ceilings = [10, 20, 40, 80, 100, 100].map(Duration::from_millis);
            for (delay, ceiling) in delays.iter().zip(ceilings) {
                assert!(*delay <= ceiling, "{delay:?} > {ceiling:?}");
            }
        }
    }

    #[test]
    fn jitter_reaches_below_the_base_delay() {
        // Full jitter, not backon's "delay plus up to one more delay": some draws fall under half
        // the ceiling (the chance that none of 200 does is 2^-200).
        let policy = RetryPolicy {
            max_retries: 1,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(100),
        };
        let low = (0..200)
            .filter_map(|_| policy.backoff().next())
            .filter(|d| *d < Duration::from_millis(50))
            .count();
        assert!(low > 0);
    }

    #[test]
    fn zero_retries_means_no_delay_at_all() {
        let policy = RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff().count(), 0);
    }

    #[test]
    fn validation_names_the_setting() {
        let policy = RetryPolicy {
            base_delay: Duration::from_secs(2),
            ..RetryPolicy::default()
        };
        assert!(
            policy
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("base retry delay")
        );
    }
}
