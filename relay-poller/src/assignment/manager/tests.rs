//! Several pollers' rounds against an in-memory lease table with the same conditional semantics
//! as the DynamoDB adapter, on a clock moved by hand.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Mutex, MutexGuard};

use super::*;
use crate::assignment::{Lease, Term};
use crate::assignment::{PageStart, ShardAssignment};
use outbox_shared::schema::PendingPartition;

const DURATION: Millis = 3_000;
const RENEW: Millis = 1_000;
/// Simulated time advances in steps of this.
const STEP: Millis = 100;

#[derive(Debug, Clone)]
struct FakeClock(Arc<AtomicI64>);

impl FakeClock {
    fn new() -> Self {
        Self(Arc::new(AtomicI64::new(1_700_000_000_000)))
    }

    fn advance(&self, by: Millis) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
struct Table {
    leases: BTreeMap<PendingPartition, Lease>,
    heartbeats: BTreeMap<String, Heartbeat>,
}

/// How a hand-over write that took effect answers (a fault of the poller's connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LostReply {
    /// The reply was lost and the SDK's retries ran out: an error.
    Fails,
    /// The reply was lost and the SDK retried the write, which the condition then refused (the
    /// lease is no longer the holder's): "not mine", as DynamoDB answers a retried conditional
    /// write that was applied the first time.
    NotMine,
}

/// One poller's connection to the shared table; `down` makes every call of this poller fail;
/// `hand_over_reply` makes its next hand-over take effect and answer as set.
#[derive(Debug, Clone, Default)]
struct MemoryStore {
    table: Arc<Mutex<Table>>,
    down: Arc<AtomicBool>,
    hand_over_reply: Arc<Mutex<Option<LostReply>>>,
}

impl MemoryStore {
    /// Another poller's connection to the same table.
    fn connect(&self) -> Self {
        Self {
            table: self.table.clone(),
            down: Arc::default(),
            hand_over_reply: Arc::default(),
        }
    }

    fn check(&self) -> Result<MutexGuard<'_, Table>, LeaseError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError::Call {
                table: "leases".into(),
                failure: outbox_shared::SdkFailure::incomplete("UpdateItem", "injected"),
            });
        }
        Ok(self.table.lock().unwrap())
    }

    fn owners(&self) -> BTreeMap<u16, Option<String>> {
        self.table
            .lock()
            .unwrap()
            .leases
            .iter()
            .map(|(s, l)| (s.shard, l.owner.clone()))
            .collect()
    }
}

impl LeaseStore for MemoryStore {
    async fn read(&self) -> Result<LeaseView, LeaseError> {
        let table = self.check()?;
        Ok(LeaseView {
            leases: table.leases.clone(),
            heartbeats: table.heartbeats.clone(),
        })
    }

    async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), LeaseError> {
        self.check()?
            .heartbeats
            .insert(heartbeat.owner.clone(), heartbeat.clone());
        Ok(())
    }

    async fn remove_heartbeat(&self, owner: &str) -> Result<(), LeaseError> {
        self.check()?.heartbeats.remove(owner);
        Ok(())
    }

    async fn take(
        &self,
        shard: &PendingPartition,
        expect: Expect,
        owner: &str,
        term: Term,
    ) -> Result<Option<Lease>, LeaseError> {
        let Term {
            at: now,
            expires_at,
        } = term;
        let mut table = self.check()?;
        let current = table.leases.get(shard);
        let counter = match (expect, current) {
            (Expect::Missing, None) => 0,
            (Expect::Counter(c), Some(l)) if l.counter == c => c,
            _ => return Ok(None),
        };
        let lease = Lease {
            partition: shard.clone(),
            owner: Some(owner.into()),
            expires_at,
            renewed_at: now,
            taken_at: now,
            counter: counter + 1,
            handoff_to: None,
            last_pass_at: current.and_then(|l| l.last_pass_at),
        };
        table.leases.insert(shard.clone(), lease.clone());
        Ok(Some(lease))
    }

    async fn renew(
        &self,
        shard: &PendingPartition,
        owner: &str,
        counter: u64,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> Result<Option<Lease>, LeaseError> {
        let Term {
            at: now,
            expires_at,
        } = term;
        let mut table = self.check()?;
        let Some(lease) = table.leases.get_mut(shard) else {
            return Ok(None);
        };
        if lease.owner.as_deref() != Some(owner) || lease.counter != counter {
            return Ok(None);
        }
        lease.expires_at = expires_at;
        lease.renewed_at = now;
        lease.counter += 1;
        if last_pass_at.is_some() {
            lease.last_pass_at = last_pass_at;
        }
        Ok(Some(lease.clone()))
    }

    async fn request_handoff(
        &self,
        shard: &PendingPartition,
        holder: &str,
        requester: &str,
    ) -> Result<bool, LeaseError> {
        let mut table = self.check()?;
        match table.leases.get_mut(shard) {
            Some(l) if l.owner.as_deref() == Some(holder) && l.handoff_to.is_none() => {
                l.handoff_to = Some(requester.into());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn hand_over(
        &self,
        shard: &PendingPartition,
        owner: &str,
        counter: u64,
        to: &str,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> Result<bool, LeaseError> {
        let Term {
            at: now,
            expires_at,
        } = term;
        let mut table = self.check()?;
        match table.leases.get_mut(shard) {
            Some(l)
                if l.owner.as_deref() == Some(owner)
                    && l.counter == counter
                    && l.handoff_to.as_deref() == Some(to) =>
            {
                l.owner = Some(to.into());
                l.expires_at = expires_at;
                l.renewed_at = now;
                l.taken_at = now;
                l.counter += 1;
                l.handoff_to = None;
                if last_pass_at.is_some() {
                    l.last_pass_at = last_pass_at;
                }
                match self.hand_over_reply.lock().unwrap().take() {
                    None => Ok(true),
                    Some(LostReply::NotMine) => Ok(false),
                    Some(LostReply::Fails) => Err(LeaseError::Call {
                        table: "leases".into(),
                        failure: outbox_shared::SdkFailure::incomplete("UpdateItem", "injected"),
                    }),
                }
            }
            _ => Ok(false),
        }
    }

    async fn withdraw_request(
        &self,
        shard: &PendingPartition,
        requester: &str,
    ) -> Result<bool, LeaseError> {
        let mut table = self.check()?;
        match table.leases.get_mut(shard) {
            Some(l) if l.handoff_to.as_deref() == Some(requester) => {
                l.handoff_to = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn clear_handoff(
        &self,
        shard: &PendingPartition,
        owner: &str,
    ) -> Result<bool, LeaseError> {
        let mut table = self.check()?;
        match table.leases.get_mut(shard) {
            Some(l) if l.owner.as_deref() == Some(owner) => {
                l.handoff_to = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(
        &self,
        shard: &PendingPartition,
        owner: &str,
        counter: u64,
        now: Millis,
        last_pass_at: Option<Millis>,
    ) -> Result<bool, LeaseError> {
        let mut table = self.check()?;
        match table.leases.get_mut(shard) {
            Some(l) if l.owner.as_deref() == Some(owner) && l.counter == counter => {
                l.owner = None;
                l.handoff_to = None;
                l.expires_at = now;
                l.renewed_at = now;
                l.counter += 1;
                if last_pass_at.is_some() {
                    l.last_pass_at = last_pass_at;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

fn settings() -> LeaseSettings {
    LeaseSettings {
        table_name: "leases".into(),
        duration: Duration::from_millis(DURATION as u64),
        renew_interval: Duration::from_millis(RENEW as u64),
        create_table: false,
    }
}

struct Member {
    manager: LeaseManager<MemoryStore, FakeClock>,
    assignment: LeasedShards<FakeClock>,
    down: Arc<AtomicBool>,
    hand_over_reply: Arc<Mutex<Option<LostReply>>>,
    /// When its rounds run within each renew interval.
    phase: Millis,
    running: bool,
}

/// Pollers sharing one table and one clock, each running a round once per renew interval at
/// its own phase.
struct Fleet {
    table: MemoryStore,
    clock: FakeClock,
    shards: Vec<u16>,
    members: Vec<Member>,
    elapsed: Millis,
}

impl Fleet {
    fn new(shards: u16) -> Self {
        Self {
            table: MemoryStore::default(),
            clock: FakeClock::new(),
            shards: (0..shards).collect(),
            members: Vec::new(),
            elapsed: 0,
        }
    }

    /// Starts a poller whose rounds run `phase` into each renew interval; its index.
    fn join(&mut self, name: &str, phase: Millis) -> usize {
        let store = self.table.connect();
        let down = store.down.clone();
        let hand_over_reply = store.hand_over_reply.clone();
        let manager = LeaseManager::new(
            store,
            self.clock.clone(),
            name,
            self.shards.iter().map(|&s| s.into()).collect(),
            settings(),
        );
        let assignment = manager.assignment();
        self.members.push(Member {
            manager,
            assignment,
            down,
            hand_over_reply,
            phase: (self.elapsed + phase) % RENEW,
            running: true,
        });
        self.members.len() - 1
    }

    /// Advances time by `by`, running every due round; after each step, checks that no shard
    /// may be polled by two pollers at once.
    async fn run_for(&mut self, by: Millis) {
        let end = self.elapsed + by;
        while self.elapsed < end {
            for member in self.members.iter().filter(|m| m.running) {
                if self.elapsed % RENEW == member.phase {
                    member.manager.round().await.unwrap();
                }
            }
            self.assert_no_shard_polled_twice();
            self.clock.advance(STEP);
            self.elapsed += STEP;
        }
    }

    /// Runs until `done` holds (checked every step) or `limit` passes; the time it took.
    async fn run_until(&mut self, limit: Millis, done: impl Fn(&Self) -> bool) -> Option<Millis> {
        let start = self.elapsed;
        while self.elapsed - start <= limit {
            if done(self) {
                return Some(self.elapsed - start);
            }
            self.run_for(STEP).await;
        }
        None
    }

    fn pollers_of(&self, shard: u16) -> Vec<usize> {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.running)
            .filter(|(_, m)| {
                let start = m.assignment.begin_page(&shard.into());
                if matches!(start, PageStart::Go { .. }) {
                    m.assignment.end_page(&shard.into());
                    true
                } else {
                    false
                }
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn assert_no_shard_polled_twice(&self) {
        for &shard in &self.shards {
            let pollers = self.pollers_of(shard);
            assert!(
                pollers.len() <= 1,
                "shard {shard} may be polled by {pollers:?} at {} ms",
                self.elapsed
            );
        }
    }

    fn owned(&self, member: usize) -> usize {
        self.members[member].manager.owned().len()
    }

    fn counts(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].running)
            .map(|i| self.owned(i))
            .collect()
    }

    /// Every shard has exactly one running poller allowed to poll it.
    fn all_polled(&self) -> bool {
        self.shards.iter().all(|&s| self.pollers_of(s).len() == 1)
    }
}

fn balanced(counts: &[usize], low: usize, high: usize) -> bool {
    counts.iter().all(|&c| c >= low && c <= high)
}

#[tokio::test]
async fn three_pollers_split_sixteen_shards_five_or_six_each_within_three_durations() {
    // Given three pollers starting within one renew interval of each other
    let mut fleet = Fleet::new(16);
    for (name, phase) in [("a", 0), ("b", 300), ("c", 700)] {
        fleet.join(name, phase);
    }

    // When they run
    let took = fleet
        .run_until(3 * DURATION, |f| {
            balanced(&f.counts(), 5, 6) && f.counts().iter().sum::<usize>() == 16
        })
        .await;

    // Then each holds 5 or 6 within three lease durations, each shard polled by exactly one
    assert!(took.is_some(), "counts {:?}", fleet.counts());
    assert!(fleet.all_polled());
    // And the split stays put
    fleet.run_for(5 * DURATION).await;
    assert!(balanced(&fleet.counts(), 5, 6), "{:?}", fleet.counts());
}

#[tokio::test]
async fn a_lone_poller_announces_itself_before_it_takes_anything() {
    let mut fleet = Fleet::new(4);
    let a = fleet.join("a", 0);

    let first = fleet.members[a].manager.round().await.unwrap();
    fleet.clock.advance(RENEW);
    let second = fleet.members[a].manager.round().await.unwrap();

    assert!(first.taken.is_empty());
    assert_eq!(second.taken.len(), 4);
    assert_eq!(second.takeovers, 0);
}

#[tokio::test]
async fn a_killed_pollers_shards_are_taken_within_two_durations() {
    // Given three pollers balanced over 16 shards
    let mut fleet = Fleet::new(16);
    for (name, phase) in [("a", 0), ("b", 300), ("c", 700)] {
        fleet.join(name, phase);
    }
    fleet.run_for(3 * DURATION).await;
    assert!(balanced(&fleet.counts(), 5, 6));

    // When c stops without a word (SIGKILL: no release, no more rounds)
    fleet.members[2].running = false;
    let took = fleet
        .run_until(2 * DURATION, |f| f.owned(0) + f.owned(1) == 16)
        .await;

    // Then a and b hold all 16 within two lease durations, 8 each
    assert!(took.is_some(), "{:?}", fleet.table.owners());
    assert_eq!((fleet.owned(0), fleet.owned(1)), (8, 8));
    let owners = fleet.table.owners();
    assert!(owners.values().all(|o| o.as_deref() != Some("c")));
}

#[tokio::test]
async fn released_leases_are_taken_at_the_next_round() {
    // Given three balanced pollers
    let mut fleet = Fleet::new(16);
    for (name, phase) in [("a", 0), ("b", 300), ("c", 700)] {
        fleet.join(name, phase);
    }
    fleet.run_for(3 * DURATION).await;
    let c_owned = fleet.owned(2);

    // When c releases everything (SIGTERM) and stops
    let released = fleet.members[2].manager.release_all().await;
    fleet.members[2].running = false;

    // Then its leases are free at once and the others hold all 16 within one renew interval
    assert_eq!(released, c_owned);
    let free = fleet
        .table
        .owners()
        .values()
        .filter(|o| o.is_none())
        .count();
    assert_eq!(free, c_owned);
    assert!(
        !fleet
            .table
            .table
            .lock()
            .unwrap()
            .heartbeats
            .contains_key("c")
    );
    let took = fleet
        .run_until(RENEW, |f| f.owned(0) + f.owned(1) == 16)
        .await;
    assert!(took.is_some(), "{:?}", fleet.table.owners());
}

#[tokio::test]
async fn a_fourth_poller_gets_four_one_lease_per_round_at_most_with_no_gap() {
    // Given three pollers balanced over 16 shards
    let mut fleet = Fleet::new(16);
    for (name, phase) in [("a", 0), ("b", 300), ("c", 700)] {
        fleet.join(name, phase);
    }
    fleet.run_for(3 * DURATION).await;

    // When a fourth joins, watched round by round
    let d = fleet.join("d", 500);
    let mut previous = 0;
    let mut unpolled_for: BTreeMap<u16, Millis> = BTreeMap::new();
    let mut longest_gap = 0;
    for _ in 0..(4 * DURATION / STEP) {
        fleet.run_for(STEP).await;
        let now = fleet.owned(d);
        assert!(
            now <= previous + 1,
            "d went from {previous} to {now} in one step"
        );
        previous = now;
        for &shard in &fleet.shards {
            let gap = unpolled_for.entry(shard).or_default();
            *gap = if fleet.pollers_of(shard).is_empty() {
                *gap + STEP
            } else {
                0
            };
            longest_gap = longest_gap.max(*gap);
        }
    }

    // Then all four hold 4, and no shard went unpolled for a lease duration
    assert_eq!(fleet.counts(), [4, 4, 4, 4]);
    assert!(
        longest_gap < DURATION,
        "a shard went unpolled for {longest_gap} ms"
    );
}

#[tokio::test]
async fn a_poller_that_cannot_renew_stops_polling_before_its_lease_can_be_taken() {
    // Given a holds all four shards and b is live holding none
    let mut fleet = Fleet::new(4);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW).await;
    let b = fleet.join("b", 500);
    fleet.members[b].running = false;
    assert_eq!(fleet.owned(a), 4);

    // When a's calls start failing right after a successful round
    fleet.run_for(RENEW).await;
    fleet.members[a].down.store(true, Ordering::SeqCst);
    fleet.members[b].running = true;
    let mut a_stopped = None;
    let mut b_started = None;
    for _ in 0..(3 * DURATION / STEP) {
        fleet.run_for(STEP).await;
        if fleet.pollers_of(0) != [a] && a_stopped.is_none() {
            a_stopped = Some(fleet.elapsed);
        }
        if fleet.pollers_of(0) == [b] && b_started.is_none() {
            b_started = Some(fleet.elapsed);
        }
    }

    // Then a stopped polling at its poll deadline, and b took over only after that
    let (stopped, started) = (a_stopped.unwrap(), b_started.unwrap());
    assert!(
        stopped < started,
        "a stopped at {stopped}, b started at {started}"
    );
    assert!(
        started - stopped >= RENEW,
        "the gap ({} ms) is the skew allowance",
        started - stopped
    );
    assert_eq!(fleet.owned(b), 4);
}

#[tokio::test]
async fn a_hand_over_waits_for_the_page_in_flight() {
    // Given a holds both shards and b joins and asks for one
    let mut fleet = Fleet::new(2);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW).await;
    assert_eq!(fleet.owned(a), 2);
    let b = fleet.join("b", 500);
    fleet.run_for(2 * RENEW).await;
    let asked = fleet
        .table
        .table
        .lock()
        .unwrap()
        .leases
        .values()
        .find(|l| l.handoff_to.as_deref() == Some("b"))
        .map(|l| l.partition.shard);
    let Some(shard) = asked else {
        // b asked and a already handed it over: start again with a page in flight first
        panic!("b did not ask for a lease: {:?}", fleet.table.owners());
    };

    // When a page of that shard is in flight at a's next rounds
    let PageStart::Go { .. } = fleet.members[a].assignment.begin_page(&shard.into()) else {
        panic!("a may not poll shard {shard}");
    };
    fleet.run_for(2 * RENEW).await;

    // Then a keeps the lease and starts no new page of it, and b does not poll it
    assert_eq!(fleet.table.owners()[&shard].as_deref(), Some("a"));
    assert_eq!(
        fleet.members[a].assignment.begin_page(&shard.into()),
        PageStart::Stop
    );
    assert!(fleet.pollers_of(shard).is_empty());

    // And once the page ends, the next rounds hand it over
    fleet.members[a].assignment.end_page(&shard.into());
    fleet.run_for(2 * RENEW).await;
    assert_eq!(fleet.table.owners()[&shard].as_deref(), Some("b"));
    assert_eq!(fleet.pollers_of(shard), [b]);
    assert_eq!((fleet.owned(a), fleet.owned(b)), (1, 1));
}

#[tokio::test]
async fn the_sweep_covers_only_shards_nobody_owned_for_a_lease_duration() {
    // Given a lone poller that has taken every shard
    let mut fleet = Fleet::new(4);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW + STEP).await;
    assert!(
        fleet.members[a]
            .assignment
            .for_pass()
            .await
            .orphaned
            .is_empty()
    );

    // When it loses access for good, its leases expire and nobody takes them
    fleet.members[a].down.store(true, Ordering::SeqCst);
    fleet.run_for(DURATION).await;
    let pass = fleet.members[a].assignment.for_pass().await;
    assert!(pass.poll.is_empty(), "past the poll deadline: {pass:?}");
    assert!(
        pass.orphaned.is_empty(),
        "expired, but not yet for a duration"
    );
    fleet.run_for(DURATION).await;

    // Then its sweep covers them all, from the last view it read
    let pass = fleet.members[a].assignment.for_pass().await;
    assert_eq!(pass.orphaned, [0, 1, 2, 3].map(PendingPartition::from));
}

#[tokio::test]
async fn a_lease_taken_over_counts_as_a_takeover_and_a_fresh_one_does_not() {
    let mut fleet = Fleet::new(2);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW + STEP).await;
    fleet.members[a].running = false;
    let b = fleet.join("b", 200);
    let mut takeovers = 0;
    for _ in 0..(2 * DURATION / RENEW) {
        fleet.clock.advance(RENEW);
        takeovers += fleet.members[b].manager.round().await.unwrap().takeovers;
    }
    assert_eq!(fleet.owned(b), 2);
    assert_eq!(takeovers, 2);
}

#[tokio::test]
async fn a_poller_that_stops_withdraws_its_request_and_releases_what_was_just_handed_to_it() {
    // Given a holds both shards and b has asked for one
    let mut fleet = Fleet::new(2);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW).await;
    let b = fleet.join("b", 500);
    fleet.run_for(2 * RENEW).await;
    let asked = |fleet: &Fleet| {
        fleet
            .table
            .table
            .lock()
            .unwrap()
            .leases
            .values()
            .find(|l| l.handoff_to.as_deref() == Some("b"))
            .map(|l| l.partition.shard)
    };
    let shard = asked(&fleet).expect("b asked for a lease");

    // When b stops before a answers
    fleet.members[b].manager.release_all().await;
    fleet.members[b].running = false;
    fleet.run_for(2 * RENEW).await;

    // Then a keeps the lease and polls it: nothing was handed to a poller that is gone
    assert_eq!(asked(&fleet), None);
    assert_eq!(fleet.table.owners()[&shard].as_deref(), Some("a"));
    assert_eq!(fleet.pollers_of(shard), [a]);

    // And a lease handed over to a poller after its last round, right before it stops, is
    // released by it too
    let c = fleet.join("c", 700);
    let requested = fleet
        .run_until(3 * RENEW, |f| {
            f.table
                .table
                .lock()
                .unwrap()
                .leases
                .values()
                .any(|l| l.handoff_to.as_deref() == Some("c"))
        })
        .await;
    assert!(
        requested.is_some(),
        "c did not ask: {:?}",
        fleet.table.owners()
    );
    fleet.members[c].running = false;
    let answered = fleet.members[a].manager.renew_round().await.unwrap();
    assert_eq!(answered.handed_over.len(), 1, "{answered:?}");
    assert!(
        fleet.members[c].manager.owned().is_empty(),
        "c has not adopted it"
    );
    let released = fleet.members[c].manager.release_all().await;
    assert_eq!(released, 1);
    assert!(
        fleet
            .table
            .owners()
            .values()
            .all(|o| o.as_deref() != Some("c")),
        "{:?}",
        fleet.table.owners()
    );
}

/// A hand-over whose write took effect but whose answer did not say so: `a` must not poll the
/// shard again, since `b` adopts it at its next round.
async fn a_hand_over_whose_reply_was_lost(reply: LostReply) {
    // Given a holds both shards, and the reply to its next hand-over will be lost (`reply`)
    let mut fleet = Fleet::new(2);
    let a = fleet.join("a", 0);
    fleet.run_for(2 * RENEW).await;
    assert_eq!(fleet.owned(a), 2);
    *fleet.members[a].hand_over_reply.lock().unwrap() = Some(reply);

    // When b joins and asks for one, and a hands it over at its next round
    let b = fleet.join("b", 500);
    let handed = fleet
        .run_until(4 * RENEW, |f| {
            f.members[a].hand_over_reply.lock().unwrap().is_none()
        })
        .await;
    assert!(
        handed.is_some(),
        "a never handed over: {:?}",
        fleet.table.owners()
    );

    // Then b adopts it at its next round while a polls it no more (run_for checks at every
    // step that no shard may be polled by two pollers), and a's next renewal finds it lost
    fleet.run_for(2 * RENEW).await;
    assert_eq!((fleet.owned(a), fleet.owned(b)), (1, 1));
    for partition in fleet.members[b].manager.owned() {
        assert_eq!(fleet.pollers_of(partition.shard), [b]);
    }
}

#[tokio::test]
async fn a_hand_over_written_but_failed_leaves_the_holder_stopped_until_a_renewal_says() {
    a_hand_over_whose_reply_was_lost(LostReply::Fails).await;
}

#[tokio::test]
async fn a_hand_over_written_then_retried_into_not_mine_leaves_the_holder_stopped() {
    a_hand_over_whose_reply_was_lost(LostReply::NotMine).await;
}

#[tokio::test]
async fn a_poller_of_a_global_table_leases_the_regions_it_serves_and_releases_one_it_stops_serving()
{
    // Given a poller of eu-west-1 that may lease both regions' shards but serves its own only
    let region = |name: &str| outbox_shared::Region::new(name).unwrap();
    let (own, other) = (region("eu-west-1"), region("us-east-1"));
    let of = |region: &outbox_shared::Region| -> BTreeSet<PendingPartition> {
        (0..2)
            .map(|s| PendingPartition::regional(region.clone(), s))
            .collect()
    };
    let clock = FakeClock::new();
    let store = MemoryStore::default();
    let served = ServedRegions::default();
    served.set([own.clone()].into());
    let manager = LeaseManager::new(
        store.connect(),
        clock.clone(),
        "a",
        of(&own).into_iter().chain(of(&other)).collect(),
        settings(),
    )
    .serving(served.clone());
    let assignment = manager.assignment();
    for _ in 0..2 {
        manager.round().await.unwrap();
        clock.advance(RENEW);
    }
    assert_eq!(manager.owned(), of(&own), "its own region's only");

    // When it adopts us-east-1, it leases its shards too
    served.set([own.clone(), other.clone()].into());
    manager.round().await.unwrap();
    clock.advance(RENEW);
    assert_eq!(manager.owned().len(), 4);

    // When it stops serving us-east-1 with a page of it in flight
    let adopted = PendingPartition::regional(other.clone(), 0);
    let PageStart::Go { .. } = assignment.begin_page(&adopted) else {
        panic!("the adopted shard may be polled");
    };
    served.stop(&other);

    // Then no new page of the region starts, and the lease of the page in flight is kept
    let next = PendingPartition::regional(other.clone(), 1);
    assert_eq!(assignment.begin_page(&next), PageStart::Stop);
    assert!(
        !assignment
            .for_pass()
            .await
            .poll
            .iter()
            .any(|p| p.origin == Some(other.clone()))
    );
    let report = manager.round().await.unwrap();
    clock.advance(RENEW);
    assert_eq!(report.released, [next]);
    assert!(manager.owned().contains(&adopted));

    // And once the page ends, the next round releases it: the region's own pollers take it at once
    assignment.end_page(&adopted);
    let report = manager.round().await.unwrap();
    assert_eq!(report.released, [adopted]);
    assert_eq!(manager.owned(), of(&own));
    let now = clock.now();
    let table = store.table.lock().unwrap();
    for partition in of(&other) {
        assert_eq!(table.leases[&partition].holder_at(now), None, "{partition}");
    }
}
