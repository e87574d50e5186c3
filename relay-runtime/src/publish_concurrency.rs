//! The publish concurrency: how many `PutEvents` calls a publisher has in flight at once, adapted
//! to how fast the bus answers.
//!
//! A bus that serves calls one after the other answers each once the calls queued ahead of it are
//! done, so its latency grows with the calls in flight. When the bus, or the network to it, slows
//! down, a publisher that keeps as many calls in flight as before only lengthens that queue: every
//! call runs past the SDK's attempt timeout, and every retry does too, although the bus would
//! have taken the calls one at a time. A timed-out call is therefore congestion, as a throttle is,
//! and the publisher lowers what it has in flight:
//!
//! - It starts at the calls one publish may have (`max_concurrency`). Until the first timeout,
//!   each call answered in time while the limit was in use (at least half of it in flight when
//!   the call was sent) raises it by one: half as much again each round trip, so the poller's
//!   shards together reach what they ask for within a few round trips of a healthy bus (16 to
//!   256 in seven: 70 ms at 10 ms a call) (slow start).
//! - On a timeout, the limit halves, from the calls in flight then if that is fewer, never below
//!   [`MIN_LIMIT`]. Timeouts of calls sent before that decrease are the same episode and do not
//!   lower it again: one slow wave halves it once.
//! - After a timeout, each call answered in time while the limit was in use raises it by one
//!   limit's share (about half a call per round trip), probing back up slowly enough that a slow
//!   bus sees few timeouts (congestion avoidance).
//! - When even a call sent alone (the limit at its floor) times out, the bus answers nothing:
//!   calls stop queueing for a place behind it. A caller that finds the one place taken is
//!   turned away (its call is not sent and its events stay pending) instead of waiting for
//!   timeout after timeout, one call at a time; the call that has the place goes on probing. The
//!   next call answered in time ends that. So a pass against a bus that answers nothing ends in
//!   about as many timeouts as before, not one per call.
//! - It needs no ceiling: it grows only while calls ask for it, so it never passes twice the
//!   calls the publishes have in flight, and each publish keeps its own `max_concurrency`.
//!
//! That is TCP's congestion window (slow start, then additive increase and multiplicative
//! decrease). The publish rate ([`crate::publish_rate`]) answers the bus's quota, which it
//! states with throttles; a timeout leaves it as it is (lowered too, it fell to 1 entry/s
//! against a bus that answered nothing, and every call waited its turn at that rate). One limit
//! is shared by a publisher's clones, so it bounds every publish of the process together (the
//! poller's shards).
//!
//! No maintained crate fits: `tower`'s `ConcurrencyLimit` is fixed; `congestion-limiter` (one
//! release, 0.1.0) starts from a fixed limit and lowers it on every failed call, so one wave of
//! timeouts takes it to its floor; vector's adaptive concurrency is not a crate of its own (its
//! fork `rate_limiter_aimd` is bound to `reqwest`).

use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The limit never drops below this many calls in flight.
pub const MIN_LIMIT: usize = 1;

/// The in-flight limit of one publisher, shared by its clones.
#[derive(Debug)]
pub struct PublishConcurrency {
    state: Mutex<State>,
    /// Woken when a call ends or the limit grows: a waiting caller may have room.
    room: Notify,
}

#[derive(Debug)]
struct State {
    /// Calls allowed in flight (the whole part); it grows by fractions after a timeout.
    limit: f64,
    in_flight: usize,
    /// When the limit was last lowered.
    lowered_at: Option<Instant>,
    /// Times the limit was lowered.
    decreases: u64,
    /// A call sent alone timed out, and none has been answered in time since.
    stalled: bool,
}

/// One call's place in flight; it frees the place when dropped. Say how the call went with
/// [`Permit::answered`] or [`Permit::timed_out`]; a permit dropped without either (a call
/// abandoned at a deadline) changes nothing.
#[derive(Debug)]
#[must_use = "a call holds its permit while it is in flight"]
pub struct Permit<'a> {
    owner: &'a PublishConcurrency,
    sent_at: Instant,
    /// The limit was in use when the call was sent: at least half of it in flight.
    in_use: bool,
    /// The call was sent alone: the limit was at its floor.
    alone: bool,
}

impl PublishConcurrency {
    /// A limit of `initial` calls in flight (at least [`MIN_LIMIT`]), growing from there.
    pub fn new(initial: usize) -> Self {
        Self {
            state: Mutex::new(State {
                limit: initial.max(MIN_LIMIT) as f64,
                in_flight: 0,
                lowered_at: None,
                decreases: 0,
                stalled: false,
            }),
            room: Notify::new(),
        }
    }

    /// The calls allowed in flight now.
    pub fn limit(&self) -> usize {
        self.lock().whole_limit()
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Times the limit was lowered after a timeout.
    pub fn decreases(&self) -> u64 {
        self.lock().decreases
    }

    /// Waits until a call may be sent within the limit, and takes its place. `None` when
    /// `stop_at` comes first, or when the bus answers nothing (a call sent alone timed out) and
    /// the place is taken.
    pub async fn acquire(&self, stop_at: Option<Instant>) -> Option<Permit<'_>> {
        let wait = async {
            loop {
                // Registered before the check, so a place freed in between still wakes it.
                let room = self.room.notified();
                tokio::pin!(room);
                room.as_mut().enable();
                if let Some(permit) = self.try_acquire() {
                    return Some(permit);
                }
                if self.lock().stalled {
                    return None;
                }
                room.await;
            }
        };
        match stop_at {
            None => wait.await,
            Some(at) => tokio::time::timeout_at(at, wait).await.ok().flatten(),
        }
    }

    /// Takes a place if the limit leaves one.
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut state = self.lock();
        let limit = state.whole_limit();
        if state.in_flight >= limit {
            return None;
        }
        state.in_flight += 1;
        let in_use = state.in_flight * 2 >= limit;
        Some(Permit {
            owner: self,
            sent_at: Instant::now(),
            in_use,
            alone: limit == MIN_LIMIT,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("publish concurrency lock is not poisoned")
    }
}

impl State {
    fn whole_limit(&self) -> usize {
        // The limit is at least MIN_LIMIT and grows by at most one per call: it fits.
        self.limit as usize
    }
}

impl Permit<'_> {
    /// The call was answered in time (accepted, throttled or refused: the bus answered): if the
    /// call used the limit, it grows by one before the first timeout, by one limit's share after.
    pub fn answered(self) {
        let mut state = self.owner.lock();
        state.stalled = false;
        if !self.in_use {
            return;
        }
        state.limit += if state.lowered_at.is_none() {
            1.0
        } else {
            1.0 / state.limit
        };
    }

    /// The call got no answer in time: the limit halves, once per episode (a call sent before the
    /// last decrease left at the old limit), down to [`MIN_LIMIT`]. Returns the new limit when it
    /// dropped.
    pub fn timed_out(self) -> Option<usize> {
        let now = Instant::now();
        let mut state = self.owner.lock();
        if self.alone && !state.stalled {
            state.stalled = true;
            // The callers waiting for a place are turned away (woken when the permit drops).
        }
        if state
            .lowered_at
            .is_some_and(|lowered| self.sent_at < lowered)
        {
            return None;
        }
        // What was in flight congested the bus, however far the limit had grown above it.
        let before = state.whole_limit().min(state.in_flight);
        let limit = (before / 2).max(MIN_LIMIT);
        if limit >= state.whole_limit() {
            // At its floor already.
            return None;
        }
        state.limit = limit as f64;
        state.lowered_at = Some(now);
        state.decreases += 1;
        Some(limit)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.owner.lock().in_flight -= 1;
        self.owner.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `n` places taken at once.
    fn take(concurrency: &PublishConcurrency, n: usize) -> Vec<Permit<'_>> {
        (0..n)
            .map(|_| concurrency.try_acquire().expect("room"))
            .collect()
    }

    /// A limit lowered from `from` calls in flight by a timeout, a millisecond ago.
    async fn lowered_from(from: usize) -> PublishConcurrency {
        let concurrency = PublishConcurrency::new(from);
        let wave = take(&concurrency, from);
        tokio::time::advance(Duration::from_secs(4)).await;
        wave.into_iter().for_each(|permit| {
            let _ = permit.timed_out();
        });
        tokio::time::advance(Duration::from_millis(1)).await;
        concurrency
    }

    #[tokio::test(start_paused = true)]
    async fn before_a_timeout_calls_in_time_double_the_limit_each_round_trip() {
        // Given a publisher's limit of 16 calls, and a process that asks for more (16 shards)
        let concurrency = PublishConcurrency::new(16);
        let mut round_trips = Vec::new();

        // When every round trip sends as many calls as the limit allows, all answered in time
        for _ in 0..4 {
            let limit = concurrency.limit();
            let wave = take(&concurrency, limit);
            assert!(concurrency.try_acquire().is_none(), "the limit holds");
            wave.into_iter().for_each(Permit::answered);
            round_trips.push(concurrency.limit());
        }

        // Then the limit grew by one per call sent with at least half of it in flight: half as
        // much again each round trip
        assert_eq!(round_trips, [25, 38, 58, 88]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_not_in_use_does_not_grow() {
        let concurrency = PublishConcurrency::new(16);
        for _ in 0..100 {
            concurrency.acquire(None).await.unwrap().answered();
        }
        assert_eq!(concurrency.limit(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wave_of_timeouts_halves_the_limit_once() {
        // Given 256 calls in flight (16 shards of 16 calls)
        let concurrency = PublishConcurrency::new(256);
        let mut wave = take(&concurrency, 256);
        tokio::time::advance(Duration::from_secs(4)).await;

        // When they all time out
        let lowered: Vec<_> = wave.drain(..).map(Permit::timed_out).collect();

        // Then the first halves the limit, and the rest, sent before that decrease, are the same
        // episode
        assert_eq!(lowered[0], Some(128));
        assert!(lowered[1..].iter().all(Option::is_none), "{lowered:?}");
        assert_eq!((concurrency.limit(), concurrency.decreases()), (128, 1));

        // And a call sent after the decrease that times out halves it again, from the 10 calls
        // in flight (fewer than the limit)
        tokio::time::advance(Duration::from_millis(1)).await;
        let later = take(&concurrency, 10);
        tokio::time::advance(Duration::from_secs(4)).await;
        let lowered: Vec<_> = later.into_iter().map(Permit::timed_out).collect();
        assert_eq!(lowered[0], Some(5));
        assert!(lowered[1..].iter().all(Option::is_none), "{lowered:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_never_drops_below_one() {
        let concurrency = PublishConcurrency::new(4);
        for _ in 0..5 {
            let permit = concurrency.acquire(None).await.unwrap();
            tokio::time::advance(Duration::from_secs(4)).await;
            let _ = permit.timed_out();
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(concurrency.limit(), MIN_LIMIT);
        // (4 to 1 at the first, halved from its one call in flight; a timeout at the floor
        // lowers nothing)
        assert_eq!(concurrency.decreases(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_timeout_the_limit_grows_by_half_a_call_per_round_trip() {
        // Given a limit lowered to 4
        let concurrency = lowered_from(8).await;
        assert_eq!(concurrency.limit(), 4);

        // When each round trip sends as many calls as the limit allows, all answered in time
        let mut round_trips = Vec::new();
        for _ in 0..6 {
            let limit = concurrency.limit();
            take(&concurrency, limit)
                .into_iter()
                .for_each(Permit::answered);
            round_trips.push(concurrency.limit());
        }

        // Then it grew by about half a call per round trip: each call sent with at least half of
        // the limit in flight adds one limit's share
        assert_eq!(round_trips, [4, 5, 5, 6, 6, 7]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_over_the_limit_waits_until_a_call_ends() {
        // Given a limit of 1 with its call in flight
        let concurrency = lowered_from(2).await;
        assert_eq!(concurrency.limit(), 1);
        let in_flight = concurrency.acquire(None).await.unwrap();
        assert!(concurrency.try_acquire().is_none());

        // When another call asks for a place, and the call in flight ends a second later
        let started = Instant::now();
        let waiter = async {
            let _permit = concurrency.acquire(None).await.unwrap();
            Instant::now()
        };
        let ender = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            in_flight.answered();
        };
        let (got_at, ()) = tokio::join!(waiter, ender);

        // Then it was let out when that call ended, not before
        assert_eq!(got_at.duration_since(started), Duration::from_secs(1));
        assert_eq!(concurrency.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_gives_up_at_its_deadline() {
        // Given a limit of 1 with its call in flight
        let concurrency = lowered_from(2).await;
        let _in_flight = concurrency.acquire(None).await.unwrap();

        // When another call asks for a place until 500 ms from now
        let stop_at = Instant::now() + Duration::from_millis(500);
        let got = concurrency.acquire(Some(stop_at)).await;

        // Then it got none, and gave up at that deadline
        assert!(got.is_none());
        assert_eq!(Instant::now(), stop_at);
        assert_eq!(concurrency.in_flight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn when_a_call_sent_alone_times_out_callers_are_turned_away_until_one_is_answered() {
        // Given a limit at its floor with its one call in flight, and two callers waiting
        let concurrency = lowered_from(2).await;
        assert_eq!(concurrency.limit(), MIN_LIMIT);
        let alone = concurrency.acquire(None).await.unwrap();

        // When that call times out
        let ender = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            let _ = alone.timed_out();
        };
        let (first, second, ()) =
            tokio::join!(concurrency.acquire(None), concurrency.acquire(None), ender);

        // Then one waiting caller takes the freed place (it probes the bus) and the other is
        // turned away; so is the next caller, at once, while the probe is out
        assert_eq!(
            usize::from(first.is_some()) + usize::from(second.is_some()),
            1
        );
        let probe = first.or(second).unwrap();
        let asked_at = Instant::now();
        assert!(concurrency.acquire(None).await.is_none());
        assert_eq!(Instant::now(), asked_at, "turned away without waiting");

        // And once a call is answered in time, callers wait for a place again
        probe.answered();
        let holders: Vec<_> = std::iter::from_fn(|| concurrency.try_acquire()).collect();
        let waiter = async { concurrency.acquire(None).await.map(|p| (Instant::now(), p)) };
        let ender = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            holders.into_iter().for_each(Permit::answered);
        };
        let (waited, ()) = tokio::join!(waiter, ender);
        let (got_at, _place) = waited.expect("a place after the wait");
        assert_eq!(got_at.duration_since(asked_at), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_dropped_unreported_frees_its_place_and_changes_nothing() {
        let concurrency = PublishConcurrency::new(4);
        drop(take(&concurrency, 3));
        assert_eq!((concurrency.limit(), concurrency.in_flight()), (4, 0));
    }
}
