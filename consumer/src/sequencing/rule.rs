//! The order rule, apart from the store: given what the store holds for an aggregate and an
//! event's `metadata.sequence`, whether to apply the event now.
//!
//! The writer numbers an aggregate's events densely from 1 (the order's version), so an event's
//! predecessor is the one numbered one less. An event after a missing predecessor is early and
//! waits (the source delivers it again); the first early event starts the aggregate's wait
//! (`gap_since`). Once the wait outlives the bound, the lowest sequence seen waiting is applied
//! past the gap; any waiting event is after twice the bound, so an early event whose delivery
//! stopped (moved to a dead-letter queue) never holds the aggregate for ever.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// What the sequence store holds for one aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateSequence {
    /// The last sequence applied (0: none yet).
    pub last: u64,
    /// Since when an event after `last + 1` has been waiting for its predecessor.
    pub gap_since: Option<DateTime<Utc>>,
    /// The lowest sequence seen waiting since `gap_since`.
    pub lowest_waiting: Option<u64>,
}

/// Whether an event is applied now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The aggregate's next event: apply it.
    Apply,
    /// After a gap that outlived the bound: apply it; `missing` sequences before it were never
    /// applied.
    ApplyAfterGap { missing: u64, waited: Duration },
    /// Its predecessor was not applied yet: report it failed, so the source delivers it later.
    Early,
    /// At or below the last sequence applied: a duplicate, acknowledged without handling.
    Duplicate,
}

impl Decision {
    /// Whether the event is applied now.
    pub fn applies(self) -> bool {
        matches!(self, Self::Apply | Self::ApplyAfterGap { .. })
    }
}

/// Whether the event numbered `sequence` is applied at `now`, its aggregate at `state`, a gap
/// waited on for at most `bound`.
pub fn decide(
    state: &AggregateSequence,
    sequence: u64,
    now: DateTime<Utc>,
    bound: Duration,
) -> Decision {
    if sequence <= state.last {
        return Decision::Duplicate;
    }
    if sequence == state.last + 1 {
        return Decision::Apply;
    }
    let Some(since) = state.gap_since else {
        return Decision::Early;
    };
    let waited = (now - since).to_std().unwrap_or_default();
    let lowest = state.lowest_waiting.is_none_or(|lowest| sequence <= lowest);
    if waited >= bound && (lowest || waited >= bound.saturating_mul(2)) {
        Decision::ApplyAfterGap {
            missing: sequence - state.last - 1,
            waited,
        }
    } else {
        Decision::Early
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(60);

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn applied(last: u64) -> AggregateSequence {
        AggregateSequence {
            last,
            ..AggregateSequence::default()
        }
    }

    #[test]
    fn the_next_sequence_applies_and_an_applied_one_is_a_duplicate() {
        // A new aggregate's first event is sequence 1
        assert_eq!(
            decide(&AggregateSequence::default(), 1, at(0), BOUND),
            Decision::Apply
        );
        assert_eq!(decide(&applied(3), 4, at(0), BOUND), Decision::Apply);
        for repeat in [1, 3] {
            assert_eq!(
                decide(&applied(3), repeat, at(0), BOUND),
                Decision::Duplicate
            );
        }
    }

    #[test]
    fn an_event_after_a_missing_predecessor_waits_until_the_gap_outlives_its_bound() {
        // Given an aggregate at 3 whose event 5 has been waiting since t=0
        let waiting = AggregateSequence {
            last: 3,
            gap_since: Some(at(0)),
            lowest_waiting: Some(5),
        };
        // Then 5 (and 6) wait while the gap is younger than the bound, as with no wait recorded
        assert_eq!(decide(&applied(3), 5, at(0), BOUND), Decision::Early);
        assert_eq!(decide(&waiting, 5, at(59), BOUND), Decision::Early);
        assert_eq!(decide(&waiting, 6, at(59), BOUND), Decision::Early);
        // And past it, the lowest waiting applies, one sequence missing
        assert_eq!(
            decide(&waiting, 5, at(60), BOUND),
            Decision::ApplyAfterGap {
                missing: 1,
                waited: BOUND
            }
        );
        // While a later one still waits for it, until twice the bound
        assert_eq!(decide(&waiting, 6, at(60), BOUND), Decision::Early);
        assert!(decide(&waiting, 6, at(120), BOUND).applies());
        // And the missing predecessor itself applies at any time
        assert_eq!(decide(&waiting, 4, at(500), BOUND), Decision::Apply);
    }
}
