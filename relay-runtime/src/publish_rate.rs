//! The publish rate: how many entries per second a publisher lets out, adapted to the bus's
//! `PutEvents` quota.
//!
//! EventBridge's `PutEvents` quota is per account and region (10,000 entries/s in the largest
//! regions, 400 to 2,400 elsewhere) and shared by every publisher on it. Above it, calls or entries
//! fail with `ThrottlingException`. Retrying them at full speed keeps the bus saturated and wastes
//! calls, so the publisher paces itself:
//!
//! - Until the first throttle, and with no ceiling, there is no limit at all (no cost on the
//!   stream relay's path).
//! - On a throttle, the limit drops to [`DECREASE_FACTOR`] of what it was (at the first throttle:
//!   of the entries accepted in the last second, or sent if none was accepted), and the next call
//!   leaves once the refused call's entries' worth has passed at the new limit: no burst to make
//!   up for a schedule that fell behind. Throttles of calls let out before that decrease are the
//!   same episode and do not lower it again.
//! - While calls are accepted, the limit grows linearly ([`INCREASE_PER_SECOND`] of the limit set
//!   at the last decrease, per second, at least [`MIN_INCREASE_PER_SECOND`]), probing back up to
//!   the quota.
//! - An optional ceiling (`--max-publish-rate`) caps it from the start.
//!
//! That is additive increase, multiplicative decrease, as TCP does for its window. Calls take
//! turns, first come first served, each `entries / limit` after the previous one, so a call waits
//! only as long as the limit requires, and calls waiting when the limit drops leave at the new one.
//!
//! No maintained crate fits: `governor` paces a fixed quota (a new limiter per change would lose
//! its schedule), and no AIMD crate is maintained.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The limit after a throttle, as a share of the limit before it.
pub const DECREASE_FACTOR: f64 = 0.7;
/// Growth per second without throttling, as a share of the limit set at the last decrease (at
/// least [`MIN_INCREASE_PER_SECOND`]).
pub const INCREASE_PER_SECOND: f64 = 0.1;
/// The least growth, in entries per second per second: a limit seeded from a small sample (a
/// throttle in a quiet moment) climbs back from 1 to 100 entries/s in 10 s.
pub const MIN_INCREASE_PER_SECOND: f64 = 10.0;
/// The limit never drops below this many entries per second.
pub const MIN_RATE: f64 = 1.0;
/// The window over which entries are counted to seed the first limit.
const WINDOW: Duration = Duration::from_secs(1);
/// How far behind now the schedule may fall, so a pause leaves a burst of this length, not more.
const MAX_BURST: Duration = Duration::from_millis(100);

/// The pacing and adaptation state of one publisher, shared by its clones.
#[derive(Debug)]
pub struct PublishRate {
    ceiling: Option<f64>,
    state: Mutex<State>,
    /// Callers waiting for their turn, first come first served.
    turn: tokio::sync::Mutex<()>,
}

/// When a call was let out, and when its turn was decided (see [`PublishRate::acquire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub send_at: Instant,
    pub reserved_at: Instant,
}

#[derive(Debug)]
struct State {
    /// Entries per second allowed now; `None` is no limit.
    limit: Option<f64>,
    /// When the next entry may leave.
    next_slot: Instant,
    /// When the limit was last lowered.
    lowered_at: Option<Instant>,
    /// When the limit last grew.
    raised_at: Instant,
    /// Entries per second of growth, set at each decrease.
    step: f64,
    /// Per call in the last [`WINDOW`], oldest first: when it was answered, its entries
    /// accepted and sent.
    window: VecDeque<(Instant, u64, u64)>,
    /// Times the limit was lowered.
    decreases: u64,
}

impl State {
    /// Counts a call answered at `now` in the window.
    fn record(&mut self, now: Instant, accepted: usize, sent: usize) {
        self.window.push_back((now, accepted as u64, sent as u64));
        while self
            .window
            .front()
            .is_some_and(|(at, _, _)| now.duration_since(*at) > WINDOW)
        {
            self.window.pop_front();
        }
    }
}

impl PublishRate {
    /// A rate with an optional ceiling, in entries per second.
    pub fn new(ceiling: Option<NonZeroU32>) -> Self {
        let ceiling = ceiling.map(|c| f64::from(c.get()));
        let now = Instant::now();
        Self {
            ceiling,
            state: Mutex::new(State {
                limit: ceiling,
                next_slot: now,
                lowered_at: None,
                raised_at: now,
                step: 0.0,
                window: VecDeque::new(),
                decreases: 0,
            }),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The limit now, in entries per second (`None`: no limit).
    pub fn limit(&self) -> Option<f64> {
        self.lock().limit
    }

    /// Times the limit was lowered after throttling.
    pub fn decreases(&self) -> u64 {
        self.lock().decreases
    }

    /// Waits for the turn of a call of `entries` entries and takes it: calls leave one after the
    /// other, in the order they asked, each `entries / limit` after the previous one. Waiting
    /// callers see a lowered limit at once (no call is scheduled ahead at the old one). `None`,
    /// without waiting, when the turn would come at or after `stop_at`.
    pub async fn acquire(&self, entries: usize, stop_at: Option<Instant>) -> Option<Slot> {
        if self.lock().limit.is_none() {
            let now = Instant::now();
            return Some(Slot {
                send_at: now,
                reserved_at: now,
            });
        }
        let _turn = self.turn.lock().await;
        loop {
            let at = match self.try_reserve(entries) {
                Ok(slot) => return Some(slot),
                Err(at) => at,
            };
            if stop_at.is_some_and(|stop| at >= stop) {
                return None;
            }
            tokio::time::sleep_until(at).await;
        }
    }

    /// Takes the turn of a call of `entries` entries if it has come; otherwise when it comes.
    fn try_reserve(&self, entries: usize) -> Result<Slot, Instant> {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(limit) = state.limit else {
            return Ok(Slot {
                send_at: now,
                reserved_at: now,
            });
        };
        let earliest = now.checked_sub(MAX_BURST).unwrap_or(now);
        let at = state.next_slot.max(earliest);
        if at > now {
            return Err(at);
        }
        state.next_slot = at + Duration::from_secs_f64(entries as f64 / limit);
        Ok(Slot {
            send_at: now,
            reserved_at: now,
        })
    }

    /// Reports a call of `sent` entries, none throttled, `accepted` of them accepted: the limit
    /// grows.
    pub fn accepted(&self, sent: usize, accepted: usize) {
        let now = Instant::now();
        let mut state = self.lock();
        state.record(now, accepted, sent);
        if let (Some(limit), Some(_)) = (state.limit, state.lowered_at) {
            let grown = limit + state.step * now.duration_since(state.raised_at).as_secs_f64();
            state.limit = Some(self.ceiling.map_or(grown, |c| grown.min(c)));
        }
        state.raised_at = now;
    }

    /// Reports a call in `slot` of `sent` entries, some of them (or the whole call) refused for
    /// the quota and `accepted` of them accepted: the limit drops, once per episode (a call let
    /// out before the last decrease left at the old limit). Returns the new limit when it dropped.
    pub fn throttled(&self, slot: Slot, sent: usize, accepted: usize) -> Option<f64> {
        let now = Instant::now();
        let mut state = self.lock();
        state.record(now, accepted, sent);
        if state
            .lowered_at
            .is_some_and(|lowered| slot.reserved_at < lowered)
        {
            return None;
        }
        let before = state.limit.unwrap_or_else(|| {
            // The first throttle: what the bus accepted lately is the best guess of our share
            // of its quota; if it accepted nothing, what we sent.
            let (accepted, sent) = state
                .window
                .iter()
                .fold((0, 0), |(a, s), (_, accepted, sent)| {
                    (a + accepted, s + sent)
                });
            let entries = if accepted > 0 { accepted } else { sent };
            entries as f64 / WINDOW.as_secs_f64()
        });
        let limit = (before * DECREASE_FACTOR).max(MIN_RATE);
        state.limit = Some(limit);
        // The bus has just said it has no room: the next call leaves once the refused entries'
        // worth has passed at the new limit. Neither the schedule's slack (up to MAX_BURST
        // behind now) nor a turn set at the old limit lets a call out sooner: into the emptied
        // quota it would be throttled too, and lower the limit again as a new episode.
        state.next_slot = state
            .next_slot
            .max(now + Duration::from_secs_f64(sent as f64 / limit));
        state.step = (limit * INCREASE_PER_SECOND).max(MIN_INCREASE_PER_SECOND);
        state.lowered_at = Some(now);
        state.raised_at = now;
        state.decreases += 1;
        Some(limit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("publish rate lock is not poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(ceiling: Option<u32>) -> PublishRate {
        PublishRate::new(ceiling.and_then(NonZeroU32::new))
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_ceiling_or_a_throttle_nothing_waits() {
        let rate = rate(None);
        let now = Instant::now();
        for _ in 0..1000 {
            assert_eq!(rate.acquire(10, None).await.unwrap().send_at, now);
        }
        assert_eq!(rate.limit(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ceiling_spaces_calls_by_their_entries() {
        let rate = rate(Some(100));
        let start = Instant::now();
        let mut slots = Vec::new();
        for _ in 0..5 {
            slots.push(rate.acquire(10, None).await.unwrap().send_at);
        }
        // 10 entries at 100 entries/s take 100 ms each.
        let offsets: Vec<u128> = slots
            .iter()
            .map(|s| s.duration_since(start).as_millis())
            .collect();
        assert_eq!(offsets, [0, 100, 200, 300, 400]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_lowers_the_limit_once_per_episode_from_what_was_accepted() {
        let rate = rate(None);
        let sent = rate.acquire(10, None).await.unwrap();
        for _ in 0..50 {
            rate.accepted(10, 10);
        }
        // 500 entries accepted in the last second: the first limit is 70 % of that.
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(rate.throttled(sent, 10, 0), Some(350.0));
        // Calls scheduled before the decrease are the same episode, even if sent after it.
        assert_eq!(rate.throttled(sent, 10, 0), None);
        assert_eq!(rate.limit(), Some(350.0));
        assert_eq!(rate.decreases(), 1);
        // A call scheduled after it lowers it again.
        tokio::time::advance(Duration::from_millis(10)).await;
        let again = rate
            .throttled(rate.acquire(10, None).await.unwrap(), 10, 0)
            .unwrap();
        assert!((again - 245.0).abs() < 1e-9, "{again}");
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_throttle_the_next_calls_leave_at_the_new_limit_with_no_burst() {
        // Given a publisher with no limit whose schedule is a second behind, and 500 entries
        // accepted in the last second
        let rate = rate(None);
        let sent = rate.acquire(10, None).await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..50 {
            rate.accepted(10, 10);
        }
        tokio::time::advance(Duration::from_millis(10)).await;

        // When the bus throttles it
        assert_eq!(rate.throttled(sent, 10, 0), Some(350.0));

        // Then its next calls of 10 entries leave 10/350 s (28.6 ms) apart, the first once the
        // throttled call's 10 entries' worth has passed: the bus has just said it has no room,
        // so none leaves early to make up the past
        let now = Instant::now();
        let mut offsets = Vec::new();
        for _ in 0..4 {
            let slot = rate.acquire(10, None).await.unwrap();
            offsets.push(slot.send_at.duration_since(now).as_millis());
        }
        // (tokio's timer rounds up to the millisecond)
        assert_eq!(offsets, [29, 58, 86, 115]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bus_that_accepted_nothing_seeds_the_limit_from_what_was_sent() {
        let rate = rate(None);
        let slot = rate.acquire(10, None).await.unwrap();
        // A throttled call of 10 entries, none accepted: 70 % of 10 entries/s.
        let limit = rate.throttled(slot, 10, 0).unwrap();
        assert!((limit - 7.0).abs() < 1e-9, "{limit}");
    }

    #[tokio::test(start_paused = true)]
    async fn accepted_calls_raise_the_limit_linearly_up_to_the_ceiling() {
        let rate = rate(Some(1000));
        assert_eq!(
            rate.throttled(rate.acquire(10, None).await.unwrap(), 10, 0),
            Some(700.0)
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        rate.accepted(10, 10);
        // 10 % of the decreased limit per second.
        assert!(
            (rate.limit().unwrap() - 770.0).abs() < 1e-6,
            "{:?}",
            rate.limit()
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        rate.accepted(10, 10);
        assert!(
            (rate.limit().unwrap() - 910.0).abs() < 1e-6,
            "{:?}",
            rate.limit()
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        rate.accepted(10, 10);
        assert_eq!(rate.limit(), Some(1000.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lowered_limit_spaces_the_next_calls_and_none_leaves_after_the_deadline() {
        let rate = rate(Some(100));
        let start = Instant::now();
        let first = rate.acquire(10, None).await.unwrap();
        assert_eq!(rate.throttled(first, 10, 0), Some(70.0));
        // The next turn, set at the old limit (100 ms), moves to the new one: the throttled
        // call's 10 entries at 70 entries/s (143 ms); the one after 143 ms later.
        let second = rate.acquire(10, None).await.unwrap().send_at;
        let third = rate.acquire(10, None).await.unwrap().send_at;
        // (tokio's timer rounds up to the millisecond)
        assert_eq!(second.duration_since(start).as_millis(), 143);
        let third_ms = third.duration_since(start).as_millis();
        assert!((285..=286).contains(&third_ms), "{third_ms} ms");
        // A turn that would come after the deadline is refused without waiting.
        let stop_at = Instant::now() + Duration::from_millis(50);
        assert_eq!(rate.acquire(10, Some(stop_at)).await, None);
        assert_eq!(Instant::now(), third);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_never_drops_below_the_minimum() {
        let rate = rate(Some(1));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_millis(1)).await;
            rate.throttled(rate.acquire(1, None).await.unwrap(), 1, 0);
        }
        assert_eq!(rate.limit(), Some(MIN_RATE));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_leaves_only_a_short_burst() {
        let rate = rate(Some(100));
        rate.acquire(10, None).await.unwrap();
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        // The schedule fell 5 s behind; only 100 ms of it (10 entries) leave at once.
        assert_eq!(rate.acquire(10, None).await.unwrap().send_at, now);
        assert_eq!(rate.acquire(10, None).await.unwrap().send_at, now);
        assert_eq!(
            rate.acquire(10, None).await.unwrap().send_at,
            now + Duration::from_millis(100)
        );
    }
}
