//! Regions' rounds against replicas of one lease table that behave as a global table's do: each
//! region's writes and conditions go to its own replica, replication copies item by item when the
//! test says so (or never, across a cut link), and the later write wins, per item.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_shared::{GlobalTable, Region};

use super::plan::FRESH_ROUNDS;
use super::*;
use crate::assignment::Clock;

const AFTER: Millis = 6_000;
const ROUND: Millis = 1_000;

#[derive(Debug, Clone)]
struct FakeClock(Arc<AtomicI64>);

impl Clock for FakeClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// An item's value in one replica, with the time of the write that put it there (last writer
/// wins by it, as DynamoDB's internal timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Heartbeat(RegionHeartbeat),
    Adoption(Adoption),
}

#[derive(Debug, Default)]
struct World {
    /// Per region, its replica: key -> (write time, sequence, item).
    replicas: BTreeMap<Region, BTreeMap<String, (Millis, u64, Item)>>,
    /// Writes not yet replicated: (source region, key, write time, sequence, item).
    outbound: Vec<(Region, String, Millis, u64, Item)>,
    /// Directions held back: (from, to).
    cut: BTreeSet<(Region, Region)>,
    sequence: u64,
}

impl World {
    fn write(&mut self, region: &Region, key: String, at: Millis, item: Item) {
        self.sequence += 1;
        let seq = self.sequence;
        self.replicas
            .entry(region.clone())
            .or_default()
            .insert(key.clone(), (at, seq, item.clone()));
        self.outbound.push((region.clone(), key, at, seq, item));
    }

    /// Delivers every write whose direction is not cut to every other replica, the later write
    /// winning each item (ties by sequence).
    fn replicate(&mut self) {
        let regions: Vec<Region> = self.replicas.keys().cloned().collect();
        let mut kept = Vec::new();
        for (from, key, at, seq, item) in std::mem::take(&mut self.outbound) {
            let mut held = false;
            for to in regions.iter().filter(|r| **r != from) {
                if self.cut.contains(&(from.clone(), to.clone())) {
                    held = true;
                    continue;
                }
                let replica = self.replicas.entry(to.clone()).or_default();
                let newer = replica
                    .get(&key)
                    .is_none_or(|(t, s, _)| (*t, *s) < (at, seq));
                if newer {
                    replica.insert(key.clone(), (at, seq, item.clone()));
                }
            }
            if held {
                // Kept whole for simplicity: re-delivering to a replica that has it is a no-op.
                kept.push((from, key, at, seq, item));
            }
        }
        self.outbound = kept;
    }
}

/// One region's connection to its replica.
#[derive(Debug, Clone)]
struct Replica {
    region: Region,
    world: Arc<Mutex<World>>,
    clock: FakeClock,
}

impl RegionStore for Replica {
    async fn read(&self) -> Result<RegionView, RegionError> {
        let world = self.world.lock().unwrap();
        let mut view = RegionView::default();
        for (_, _, item) in world
            .replicas
            .get(&self.region)
            .into_iter()
            .flat_map(|r| r.values())
        {
            match item {
                Item::Heartbeat(b) => {
                    view.heartbeats.insert(b.region.clone(), b.clone());
                }
                Item::Adoption(a) => {
                    view.adoptions.insert(a.region.clone(), a.clone());
                }
            }
        }
        Ok(view)
    }

    async fn heartbeat(&self, region: &Region, owner: &str, at: Millis) -> Result<(), RegionError> {
        let beat = RegionHeartbeat {
            region: region.clone(),
            heartbeat_at: at,
            owner: owner.into(),
        };
        self.world.lock().unwrap().write(
            &self.region,
            heartbeat_key(region),
            self.clock.now(),
            Item::Heartbeat(beat),
        );
        Ok(())
    }

    async fn change(&self, change: &AdoptionChange) -> Result<bool, RegionError> {
        let mut world = self.world.lock().unwrap();
        let key = adoption_key(&change.region);
        // The condition sees this replica only.
        let current = world
            .replicas
            .get(&self.region)
            .and_then(|r| r.get(&key))
            .map(|(_, _, item)| match item {
                Item::Adoption(a) => a.epoch,
                Item::Heartbeat(_) => unreachable!(),
            });
        if current != change.expect {
            return Ok(false);
        }
        world.write(
            &self.region,
            key,
            self.clock.now(),
            Item::Adoption(change.applied()),
        );
        Ok(true)
    }
}

fn r(name: &str) -> Region {
    Region::new(name).unwrap()
}

fn settings() -> FailoverSettings {
    FailoverSettings::new(
        Duration::from_millis(AFTER as u64),
        Duration::from_millis(ROUND as u64),
    )
}

/// Regions with one poller each, one clock, replicas replicated after every round unless cut.
struct Regions {
    world: Arc<Mutex<World>>,
    clock: FakeClock,
    managers: BTreeMap<Region, RegionManager<Replica, FakeClock>>,
    /// Regions whose pollers are stopped.
    stopped: BTreeSet<Region>,
    /// Per round, the regions serving each region.
    history: Vec<BTreeMap<Region, BTreeSet<Region>>>,
}

impl Regions {
    fn new(names: &[&str]) -> Self {
        let world = Arc::new(Mutex::new(World::default()));
        let clock = FakeClock(Arc::new(AtomicI64::new(1_700_000_000_000)));
        let all: Vec<Region> = names.iter().map(|n| r(n)).collect();
        let managers = all
            .iter()
            .map(|own| {
                world
                    .lock()
                    .unwrap()
                    .replicas
                    .entry(own.clone())
                    .or_default();
                let store = Replica {
                    region: own.clone(),
                    world: world.clone(),
                    clock: clock.clone(),
                };
                let table = GlobalTable::new(own.clone(), all.clone()).unwrap();
                let manager = RegionManager::new(
                    store,
                    clock.clone(),
                    table,
                    format!("poller-{own}"),
                    settings(),
                );
                (own.clone(), manager)
            })
            .collect();
        Self {
            world,
            clock,
            managers,
            stopped: BTreeSet::new(),
            history: Vec::new(),
        }
    }

    fn served(&self, region: &str) -> BTreeSet<Region> {
        self.managers[&r(region)].served().regions()
    }

    /// Which running regions serve `region` now.
    fn publishers(&self, region: &str) -> BTreeSet<Region> {
        self.managers
            .iter()
            .filter(|(own, m)| !self.stopped.contains(*own) && m.served().serves(&r(region)))
            .map(|(own, _)| own.clone())
            .collect()
    }

    /// One round of every running region, then replication.
    async fn round(&mut self) {
        self.clock.0.fetch_add(ROUND, Ordering::SeqCst);
        for (own, manager) in &self.managers {
            if !self.stopped.contains(own) {
                manager.round().await;
            }
        }
        self.world.lock().unwrap().replicate();
        let snapshot = self
            .managers
            .keys()
            .map(|region| (region.clone(), self.publishers(region.as_str())))
            .collect();
        self.history.push(snapshot);
    }

    async fn rounds(&mut self, n: i64) {
        for _ in 0..n {
            self.round().await;
        }
    }

    fn stop(&mut self, region: &str) {
        self.stopped.insert(r(region));
    }

    /// Restarts a region's pollers: a new process, nothing remembered, nothing served.
    fn restart(&mut self, region: &str) {
        let own = r(region);
        self.stopped.remove(&own);
        let all: Vec<Region> = self.managers.keys().cloned().collect();
        let manager = RegionManager::new(
            Replica {
                region: own.clone(),
                world: self.world.clone(),
                clock: self.clock.clone(),
            },
            self.clock.clone(),
            GlobalTable::new(own.clone(), all).unwrap(),
            format!("poller-{own}-2"),
            settings(),
        );
        self.managers.insert(own, manager);
    }

    fn cut(&self, from: &str, to: &str) {
        self.world.lock().unwrap().cut.insert((r(from), r(to)));
    }

    fn restore(&self, from: &str, to: &str) {
        self.world.lock().unwrap().cut.remove(&(r(from), r(to)));
    }

    /// Rounds (from the start) in which `region` had no publisher, or more than one.
    fn rounds_without_one_publisher(&self, region: &str) -> (usize, usize) {
        let region = r(region);
        let none = self
            .history
            .iter()
            .filter(|h| h[&region].is_empty())
            .count();
        let several = self.history.iter().filter(|h| h[&region].len() > 1).count();
        (none, several)
    }
}

const ROUNDS_TO_FAIL_OVER: i64 = AFTER / ROUND;

#[tokio::test(start_paused = true)]
async fn each_region_publishes_its_own_while_all_are_up_and_nothing_before_its_first_read() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    assert!(regions.served("us-east-1").is_empty());

    regions.rounds(3 * ROUNDS_TO_FAIL_OVER).await;

    assert_eq!(regions.served("us-east-1"), [r("us-east-1")].into());
    assert_eq!(regions.served("eu-west-1"), [r("eu-west-1")].into());
    assert_eq!(regions.rounds_without_one_publisher("eu-west-1"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_dead_regions_partitions_are_adopted_after_the_failover_time() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;

    regions.stop("eu-west-1");
    let mut adopted_after = None;
    for round in 1..=2 * ROUNDS_TO_FAIL_OVER {
        regions.round().await;
        if regions.served("us-east-1").contains(&r("eu-west-1")) {
            adopted_after = Some(round);
            break;
        }
    }

    // Adopted at the first round at which its last heartbeat is AFTER old.
    assert_eq!(adopted_after, Some(ROUNDS_TO_FAIL_OVER));
    assert_eq!(regions.publishers("eu-west-1"), [r("us-east-1")].into());
}

#[tokio::test(start_paused = true)]
async fn a_region_back_waits_for_the_hand_back_and_publishing_goes_home_without_overlap() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;
    regions.stop("eu-west-1");
    regions.rounds(2 * ROUNDS_TO_FAIL_OVER).await;
    assert_eq!(regions.publishers("eu-west-1"), [r("us-east-1")].into());

    // It comes back (a new process): it does not publish its own while us-east-1 has them.
    regions.restart("eu-west-1");
    regions.round().await;
    assert_eq!(regions.served("eu-west-1"), BTreeSet::new());
    let mut home_after = None;
    for round in 2..=4 * ROUNDS_TO_FAIL_OVER {
        regions.round().await;
        if regions.served("eu-west-1").contains(&r("eu-west-1")) {
            home_after = Some(round);
            break;
        }
    }

    // Handed back after the hysteresis (AFTER of fresh heartbeats), home a round later.
    let home_after = home_after.expect("publishing went home");
    assert!(home_after > ROUNDS_TO_FAIL_OVER, "{home_after}");
    assert!(home_after <= ROUNDS_TO_FAIL_OVER + 3, "{home_after}");
    assert_eq!(regions.publishers("eu-west-1"), [r("eu-west-1")].into());
    // Never two publishers; no publisher only while it was dead (before adoption) and for the
    // round between the hand-back and the home region's start.
    let (none, several) = regions.rounds_without_one_publisher("eu-west-1");
    assert_eq!(several, 0);
    assert!(
        none <= usize::try_from(ROUNDS_TO_FAIL_OVER).unwrap() + 1,
        "{none}"
    );
}

#[tokio::test(start_paused = true)]
async fn two_regions_adopting_at_once_end_with_one_within_a_round_of_replication() {
    // Given three regions; ap-south-1 dies; eu-west-1 cannot hear us-east-1 (a cut link), so
    // both think they are the first live region after ap-south-1 and both adopt it.
    let mut regions = Regions::new(&["us-east-1", "eu-west-1", "ap-south-1"]);
    regions.rounds(2).await;
    regions.cut("us-east-1", "eu-west-1");
    regions.stop("ap-south-1");
    regions.rounds(2 * ROUNDS_TO_FAIL_OVER).await;
    assert_eq!(
        regions.publishers("ap-south-1"),
        [r("us-east-1"), r("eu-west-1")].into(),
        "both adopted"
    );

    // When the link is restored, the round's replication leaves one adopter in every replica (last
    // writer wins), and the other stops at its next round.
    regions.restore("us-east-1", "eu-west-1");
    regions.round().await;
    regions.round().await;
    let one = regions.publishers("ap-south-1");
    assert_eq!(one.len(), 1, "{one:?}");
    regions.rounds(3 * ROUNDS_TO_FAIL_OVER).await;
    assert_eq!(regions.publishers("ap-south-1"), one, "the winner keeps it");
    // The loser does not take it back while the winner lives.
    let adoption =
        regions.managers[&r("eu-west-1")].view().unwrap().adoptions[&r("ap-south-1")].clone();
    assert_eq!(adoption.adopter.as_ref(), one.first());
}

#[tokio::test(start_paused = true)]
async fn a_region_whose_adopter_died_reclaims_its_own() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;
    regions.stop("eu-west-1");
    regions.rounds(2 * ROUNDS_TO_FAIL_OVER).await;

    // eu-west-1 returns just as us-east-1, which adopted it, stops.
    regions.restart("eu-west-1");
    regions.stop("us-east-1");
    regions.rounds(2 * ROUNDS_TO_FAIL_OVER).await;

    assert_eq!(
        regions.served("eu-west-1"),
        [r("eu-west-1"), r("us-east-1")].into()
    );
}

#[tokio::test(start_paused = true)]
async fn a_poller_blind_to_the_region_items_for_the_failover_time_serves_nothing() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;
    let manager = &regions.managers[&r("us-east-1")];
    assert!(!manager.served().regions().is_empty());

    // Its replica answers no more (a store that fails every read).
    struct Down;
    impl RegionStore for Down {
        async fn read(&self) -> Result<RegionView, RegionError> {
            Err(RegionError::Call {
                table: "leases".into(),
                failure: outbox_shared::SdkFailure::incomplete("Scan", "injected"),
            })
        }
        async fn heartbeat(&self, _: &Region, _: &str, _: Millis) -> Result<(), RegionError> {
            Ok(())
        }
        async fn change(&self, _: &AdoptionChange) -> Result<bool, RegionError> {
            Ok(false)
        }
    }
    let blind = RegionManager::new(
        Down,
        regions.clock.clone(),
        GlobalTable::new(r("us-east-1"), vec![r("us-east-1"), r("eu-west-1")]).unwrap(),
        "blind",
        settings(),
    );
    blind.served.set([r("us-east-1")].into());
    blind.state().read_at = Some(regions.clock.now());

    regions.clock.0.fetch_add(AFTER - ROUND, Ordering::SeqCst);
    assert!(blind.round().await.read_failed);
    assert_eq!(blind.served().regions(), [r("us-east-1")].into());
    regions.clock.0.fetch_add(ROUND, Ordering::SeqCst);
    blind.round().await;
    assert!(blind.served().regions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_hand_back_waits_for_the_pages_in_flight() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;
    regions.stop("eu-west-1");
    regions.rounds(2 * ROUNDS_TO_FAIL_OVER).await;
    regions.restart("eu-west-1");
    // A page of eu-west-1's partitions is in flight at us-east-1 throughout.
    let served = regions.managers[&r("us-east-1")].served();
    assert!(served.begin_page(&r("eu-west-1")));

    regions.rounds(ROUNDS_TO_FAIL_OVER + FRESH_ROUNDS).await;

    // Not handed back, and no new page starts meanwhile.
    assert!(!served.begin_page(&r("eu-west-1")));
    assert_eq!(regions.publishers("eu-west-1"), BTreeSet::new());
    served.end_page(&r("eu-west-1"));
    regions.rounds(2).await;
    assert_eq!(regions.publishers("eu-west-1"), [r("eu-west-1")].into());
}

#[tokio::test(start_paused = true)]
async fn an_operators_adoption_holds_until_an_operator_hands_it_back() {
    let mut regions = Regions::new(&["us-east-1", "eu-west-1"]);
    regions.rounds(2).await;
    let operator = Replica {
        region: r("us-east-1"),
        world: regions.world.clone(),
        clock: regions.clock.clone(),
    };

    // An operator in us-east-1 evacuates eu-west-1, whose relays are healthy.
    let adopted = operator::adopt_region(
        &operator,
        regions.clock.now(),
        &r("eu-west-1"),
        &r("us-east-1"),
    )
    .await
    .unwrap();
    assert_eq!(
        adopted.line("adopt-region"),
        "adopt-region: eu-west-1 is now published by us-east-1 (epoch 1); its heartbeat is 0 s old"
    );
    regions.rounds(4 * ROUNDS_TO_FAIL_OVER).await;
    assert_eq!(regions.publishers("eu-west-1"), [r("us-east-1")].into());
    // Again: nothing to change.
    let again = operator::adopt_region(
        &operator,
        regions.clock.now(),
        &r("eu-west-1"),
        &r("us-east-1"),
    )
    .await
    .unwrap();
    assert!(!again.changed);

    let back = operator::hand_back_region(&operator, regions.clock.now(), &r("eu-west-1"))
        .await
        .unwrap();
    assert_eq!(
        (back.publisher.as_str(), back.epoch, back.changed),
        ("eu-west-1", 2, true)
    );
    regions.rounds(3).await;
    assert_eq!(regions.publishers("eu-west-1"), [r("eu-west-1")].into());
    // Both published it for the one round before the adoption reached eu-west-1's replica (the
    // window: replication, then one round); the hand-back left no overlap.
    let (_, several) = regions.rounds_without_one_publisher("eu-west-1");
    assert_eq!(several, 1);
}

#[tokio::test(start_paused = true)]
async fn an_operator_cannot_adopt_their_own_region() {
    let regions = Regions::new(&["us-east-1", "eu-west-1"]);
    let operator = Replica {
        region: r("us-east-1"),
        world: regions.world.clone(),
        clock: regions.clock.clone(),
    };

    let err = operator::adopt_region(&operator, 0, &r("us-east-1"), &r("us-east-1"))
        .await
        .unwrap_err();

    assert_eq!(
        err.to_string(),
        "us-east-1 is this process's own region (AWS_REGION): another region adopts it; to let it \
         publish its own partitions again, run hand-back-region us-east-1"
    );
}
