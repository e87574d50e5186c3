//! Region failover over a lease table replicated as a global table's (two DynamoDB Local regions
//! and the replicator: `outbox_tests::regions`): each region's region rounds
//! (`relay_poller::failover::RegionManager` on the DynamoDB adapter) write their heartbeat and
//! adoptions in their own region's replica, conditions checked there only, last writer wins across.
//!
//! Short settings (failover after 3 s, a round every 500 ms); every wait is bounded only to fail a
//! broken run, never to assert a time.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use outbox_shared::{GlobalTable, Region};
use outbox_tests::regions::{GlobalTestEnv, RegionEnv};
use outbox_tests::unique_name;
use relay_poller::assignment::SystemClock;
use relay_poller::failover::{DynamoRegionStore, FailoverSettings, RegionManager};

const FAILOVER_AFTER: Duration = Duration::from_secs(3);
const ROUND: Duration = Duration::from_millis(500);
/// Bound for a state to be reached; only reached when something is broken (or the emulators are
/// swamped by the rest of the suite).
const BOUND: Duration = Duration::from_secs(120);

type Manager = RegionManager<DynamoRegionStore, SystemClock>;

fn manager(env: &GlobalTestEnv, region: &RegionEnv, lease_table: &str, owner: &str) -> Manager {
    let regions: Vec<Region> = env.regions.iter().map(|r| r.region.clone()).collect();
    RegionManager::new(
        DynamoRegionStore::new(region.dynamodb.clone(), lease_table),
        SystemClock,
        GlobalTable::new(region.region.clone(), regions).unwrap(),
        owner,
        FailoverSettings::new(FAILOVER_AFTER, ROUND),
    )
}

/// The regions (of `running`) that publish `region` now.
fn publishers(running: &[&Manager], region: &Region) -> usize {
    running.iter().filter(|m| m.served().serves(region)).count()
}

/// Rounds of every manager of `running`, one per `ROUND`, until `done` holds after a round;
/// `each` sees every round's result. Panics with `what` past `BOUND`.
async fn rounds_until(
    running: &[&Manager],
    what: &str,
    mut each: impl FnMut(&[&Manager]),
    done: impl Fn(&[&Manager]) -> bool,
) {
    let start = Instant::now();
    loop {
        for manager in running {
            manager.round().await;
        }
        each(running);
        if done(running) {
            return;
        }
        assert!(start.elapsed() < BOUND, "not reached in {BOUND:?}: {what}");
        tokio::time::sleep(ROUND).await;
    }
}

fn set(regions: &[&Region]) -> BTreeSet<Region> {
    regions.iter().map(|r| (*r).clone()).collect()
}

#[tokio::test]
async fn a_regions_stopped_pollers_are_replaced_by_the_other_regions_and_it_gets_its_own_back() {
    // Given two regions whose pollers each publish their own region
    let env = GlobalTestEnv::new().await;
    let lease_table = unique_name("leases");
    env.create_lease_table(&lease_table).await;
    let (a, b) = (env.a().region.clone(), env.b().region.clone());
    let ma = manager(&env, env.a(), &lease_table, "poller-a");
    let mb = manager(&env, env.b(), &lease_table, "poller-b");
    rounds_until(
        &[&ma, &mb],
        "each region publishes its own",
        |_| {},
        |_| ma.served().regions() == set(&[&a]) && mb.served().regions() == set(&[&b]),
    )
    .await;

    // When b's pollers stop
    let stopped = Instant::now();
    drop(mb);
    rounds_until(&[&ma], "a adopts b", |_| {}, |_| ma.served().serves(&b)).await;

    // Then a publishes b's partitions, not before b's last heartbeat was the failover time old
    assert!(
        stopped.elapsed() >= FAILOVER_AFTER,
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(ma.served().regions(), set(&[&a, &b]));

    // When b's pollers start again, once a's adoption has reached b's replica (a restart before
    // that is the window docs/global-tables.md bounds: replication, then one round; the cut-link
    // test covers it): b waits for the hand-back, a hands back after b's heartbeat was fresh for
    // the hysteresis, and b then publishes its own
    env.replicator.wait_caught_up().await;
    let mb = manager(&env, env.b(), &lease_table, "poller-b-2");
    let mut both = 0;
    rounds_until(
        &[&ma, &mb],
        "b publishes its own again",
        |running| both += usize::from(publishers(running, &b) > 1),
        |_| mb.served().serves(&b) && !ma.served().serves(&b),
    )
    .await;

    // Then never both at once: a stopped before it wrote the hand-back, b started after reading it
    assert_eq!(both, 0);
    assert_eq!(ma.served().regions(), set(&[&a]));
    assert_eq!(mb.served().regions(), set(&[&b]));
}

#[tokio::test]
async fn a_cut_link_makes_both_regions_publish_both_until_it_is_restored_then_each_its_own() {
    // Given two regions whose pollers each publish their own region
    let env = GlobalTestEnv::new().await;
    let lease_table = unique_name("leases");
    env.create_lease_table(&lease_table).await;
    let (a, b) = (env.a().region.clone(), env.b().region.clone());
    let ma = manager(&env, env.a(), &lease_table, "poller-a");
    let mb = manager(&env, env.b(), &lease_table, "poller-b");
    rounds_until(
        &[&ma, &mb],
        "each region publishes its own",
        |_| {},
        |_| ma.served().regions() == set(&[&a]) && mb.served().regions() == set(&[&b]),
    )
    .await;

    // When the link between them is cut, both alive: each stops hearing the other's heartbeat
    env.replicator.isolate(&b, &env.regions).await;
    rounds_until(
        &[&ma, &mb],
        "each region adopts the other",
        |_| {},
        |_| ma.served().regions() == set(&[&a, &b]) && mb.served().regions() == set(&[&a, &b]),
    )
    .await;

    // When it is restored, every replica holds the same adoptions (each naming the other region):
    // within a round after replication no region has two publishers
    env.replicator.reconnect(&b, &env.regions).await;
    env.replicator.wait_caught_up().await;
    for manager in [&ma, &mb] {
        manager.round().await;
    }
    for region in [&a, &b] {
        assert!(
            publishers(&[&ma, &mb], region) <= 1,
            "{region} has two publishers"
        );
    }

    // Then each region gets its own back after the hysteresis, none with two publishers meanwhile
    let mut both = 0;
    rounds_until(
        &[&ma, &mb],
        "each region publishes its own again",
        |running| both += usize::from(publishers(running, &a) > 1 || publishers(running, &b) > 1),
        |_| ma.served().regions() == set(&[&a]) && mb.served().regions() == set(&[&b]),
    )
    .await;
    assert_eq!(both, 0);
}
