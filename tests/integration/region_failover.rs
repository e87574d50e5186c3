//! Region failover over a lease table replicated as a global table's (two DynamoDB Local regions
//! and the replicator: `outbox_tests::regions`): each region's region rounds
//! (`relay_poller::failover::RegionManager` on the DynamoDB adapter) write their heartbeat and
//! adoptions in their own region's replica, conditions checked there only, last writer wins across.
//!
//! Time here is the test's ([`TestClock`]): a round of each region, then every write replicated
//! (but across a cut link), then the clock moves on by a round's interval. A heartbeat is as old
//! as the rounds since it was written, never as slow as the emulators under the suite's load: with
//! the wall clock, a lag or a slow round under that load passed even a 6 s failover time on the
//! 2-core CI machine, and a live region was adopted (both failed so in CI). What a lag past the
//! failover time does is docs/global-tables.md's window, checked in the unit tests
//! (`relay_poller::failover::tests`) and end to end below (`relays`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use outbox_shared::{GlobalTable, Region};
use outbox_tests::regions::{GlobalTestEnv, RegionEnv};
use outbox_tests::unique_name;
use relay_poller::assignment::{Clock, Millis, SystemClock};
use relay_poller::failover::{DynamoRegionStore, FailoverSettings, RegionManager, RegionStore};

const FAILOVER_AFTER: Duration = Duration::from_secs(3);
const ROUND: Duration = Duration::from_millis(500);
/// Rounds for a state to be reached (in the test's time, a minute); only reached when something
/// is broken.
const MAX_ROUNDS: usize = 120;

/// The regions' clock, moved on by the test only (it starts at the wall clock's now).
#[derive(Debug, Clone)]
struct TestClock(Arc<AtomicI64>);

impl TestClock {
    fn new() -> Self {
        Self(Arc::new(AtomicI64::new(SystemClock.now())))
    }

    fn advance(&self, by: Duration) {
        let by = Millis::try_from(by.as_millis()).expect("a short duration");
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

type Manager = RegionManager<DynamoRegionStore, TestClock>;

/// The regions of one test: their managers' clock, and the replication between their replicas.
struct World {
    env: GlobalTestEnv,
    lease_table: String,
    clock: TestClock,
}

impl World {
    async fn new() -> Self {
        let env = GlobalTestEnv::new().await;
        let lease_table = unique_name("leases");
        env.create_lease_table(&lease_table).await;
        Self {
            env,
            lease_table,
            clock: TestClock::new(),
        }
    }

    fn manager(&self, region: &RegionEnv, owner: &str) -> Manager {
        let regions: Vec<Region> = self.env.regions.iter().map(|r| r.region.clone()).collect();
        RegionManager::new(
            DynamoRegionStore::new(region.dynamodb.clone(), &self.lease_table),
            self.clock.clone(),
            GlobalTable::new(region.region.clone(), regions).unwrap(),
            owner,
            FailoverSettings::new(FAILOVER_AFTER, ROUND),
        )
    }

    /// Rounds of every manager of `running` until `done` holds after one: each round of all, then
    /// their writes replicated (across links not cut), then the clock a `ROUND` on. `each` sees
    /// every round's result. Panics with `what` past [`MAX_ROUNDS`].
    async fn rounds_until(
        &self,
        running: &[&Manager],
        what: &str,
        mut each: impl FnMut(&[&Manager]),
        done: impl Fn(&[&Manager]) -> bool,
    ) {
        for _ in 0..MAX_ROUNDS {
            self.round(running).await;
            each(running);
            if done(running) {
                return;
            }
            self.clock.advance(ROUND);
        }
        panic!("not reached in {MAX_ROUNDS} rounds: {what}");
    }

    /// Rounds of `ma` (region a's) and `mb` (b's) until each publishes its own region only.
    async fn until_each_publishes_its_own(&self, ma: &Manager, mb: &Manager) {
        let (a, b) = (&self.env.a().region, &self.env.b().region);
        self.rounds_until(
            &[ma, mb],
            "each region publishes its own",
            |_| {},
            |_| ma.served().regions() == set(&[a]) && mb.served().regions() == set(&[b]),
        )
        .await;
    }

    /// One round of every manager of `running`, its writes then replicated.
    async fn round(&self, running: &[&Manager]) {
        for manager in running {
            manager.round().await;
        }
        self.env.replicator.wait_caught_up().await;
    }
}

/// The regions (of `running`) that publish `region` now.
fn publishers(running: &[&Manager], region: &Region) -> usize {
    running.iter().filter(|m| m.served().serves(region)).count()
}

fn set(regions: &[&Region]) -> BTreeSet<Region> {
    regions.iter().map(|r| (*r).clone()).collect()
}

#[tokio::test]
async fn a_regions_stopped_pollers_are_replaced_by_the_other_regions_and_it_gets_its_own_back() {
    // Given two regions whose pollers each publish their own region
    let world = World::new().await;
    let (a, b) = (world.env.a().region.clone(), world.env.b().region.clone());
    let ma = world.manager(world.env.a(), "poller-a");
    let mb = world.manager(world.env.b(), "poller-b");
    world.until_each_publishes_its_own(&ma, &mb).await;

    // When b's pollers stop
    drop(mb);
    world
        .rounds_until(&[&ma], "a adopts b", |_| {}, |_| ma.served().serves(&b))
        .await;

    // Then a publishes b's partitions from the first round at which b's last heartbeat was the
    // failover time old (by the items in a's replica)
    let view = DynamoRegionStore::new(world.env.a().dynamodb.clone(), &world.lease_table)
        .read()
        .await
        .expect("read the region items");
    let last_heartbeat = view.heartbeats.get(&b).expect("b's heartbeat").heartbeat_at;
    let adopted = view.adoptions.get(&b).expect("b's adoption").changed_at;
    let (after, round) = (FAILOVER_AFTER.as_millis() as i64, ROUND.as_millis() as i64);
    assert!(
        (after..after + round).contains(&(adopted - last_heartbeat)),
        "adopted {} ms after b's last heartbeat",
        adopted - last_heartbeat
    );
    assert_eq!(ma.served().regions(), set(&[&a, &b]));

    // When b's pollers start again (a's adoption replicated to b's replica): b waits for the
    // hand-back, a hands back after b's heartbeat was fresh for the hysteresis, and b then
    // publishes its own
    let mb = world.manager(world.env.b(), "poller-b-2");
    let mut both = 0;
    world
        .rounds_until(
            &[&ma, &mb],
            "each region publishes its own and no other",
            |running| both += usize::from(publishers(running, &b) > 1),
            |_| ma.served().regions() == set(&[&a]) && mb.served().regions() == set(&[&b]),
        )
        .await;

    // Then b never had two publishers: a stopped before it wrote the hand-back, b started after
    // reading it
    assert_eq!(both, 0, "rounds in which a and b both published b");
}

#[tokio::test]
async fn a_cut_link_makes_both_regions_publish_both_until_it_is_restored_then_each_its_own() {
    // Given two regions whose pollers each publish their own region
    let world = World::new().await;
    let env = &world.env;
    let (a, b) = (env.a().region.clone(), env.b().region.clone());
    let ma = world.manager(env.a(), "poller-a");
    let mb = world.manager(env.b(), "poller-b");
    world.until_each_publishes_its_own(&ma, &mb).await;

    // When the link between them is cut, both alive: each stops hearing the other's heartbeat
    env.replicator.isolate(&b, &env.regions).await;
    world
        .rounds_until(
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
    world.clock.advance(ROUND);
    world.round(&[&ma, &mb]).await;
    for region in [&a, &b] {
        assert!(
            publishers(&[&ma, &mb], region) <= 1,
            "{region} has two publishers"
        );
    }

    // Then each region gets its own back after the hysteresis, none with two publishers meanwhile
    let mut both = 0;
    world
        .rounds_until(
            &[&ma, &mb],
            "each region publishes its own again",
            |running| {
                both += usize::from(publishers(running, &a) > 1 || publishers(running, &b) > 1);
            },
            |_| ma.served().regions() == set(&[&a]) && mb.served().regions() == set(&[&b]),
        )
        .await;
    assert_eq!(both, 0);
}

/// The same, end to end: `relay-poller run` processes in each region, on the replicated outbox
/// and lease tables, the events of each region's writer reaching the consumers' queue (a FIFO
/// Custom Event Bus subscriber: it keeps each aggregate's order as published).
mod relays {
    use std::collections::{BTreeMap, HashSet};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use outbox_shared::{OutboxConfig, Region};
    use outbox_tests::regions::{GlobalTestEnv, RegionEnv};
    use outbox_tests::{SinkMessage, TEST_SOURCE, metric_sum, unique_name};
    use outbox_writer::{NewOrder, OrderLine, OrderStatus, OutboxWriter, WriterConfig};
    use relay_poller::failover::{DynamoRegionStore, RegionStore, RegionView, attr as region_attr};
    use relay_runtime::TargetKind;
    use tokio::io::AsyncReadExt;
    use tokio::process::Child;

    /// Short periods: a region is adopted 4 s after its last heartbeat, renewed every second.
    const RENEW: &str = "1s";
    const LEASE_DURATION: &str = "4s";
    const FAILOVER_AFTER: Duration = Duration::from_secs(4);
    /// Orders (aggregates) written per region and phase; each has two events (created, confirmed).
    const ORDERS: usize = 12;
    /// Bound for what a phase waits for; only reached when something is broken (or the emulators
    /// are swamped by the rest of the suite).
    const BOUND: Duration = Duration::from_secs(150);

    /// A `relay-poller run` in one region, its log and metric lines read as they come.
    struct Poller {
        child: Child,
        lines: tokio::task::JoinHandle<String>,
    }

    impl Poller {
        fn start(env: &GlobalTestEnv, region: &RegionEnv, lease_table: &str) -> Self {
            Self::with_grace(env, region, lease_table, "0s")
        }

        /// A poller that publishes an event once it is `grace` old (`--grace-period`): with a
        /// stream relay in its region, which publishes new events first.
        fn with_grace(
            env: &GlobalTestEnv,
            region: &RegionEnv,
            lease_table: &str,
            grace: &str,
        ) -> Self {
            let regions: Vec<String> = env.regions.iter().map(|r| r.region.to_string()).collect();
            let mut child = env
                .relay_command("relay-poller", region)
                .arg("run")
                .args(["--regions", &regions.join(",")])
                .args(["--lease-table", lease_table])
                .args([
                    "--lease-duration",
                    LEASE_DURATION,
                    "--lease-renew-interval",
                    RENEW,
                ])
                .args([
                    "--region-failover-after",
                    &humantime::format_duration(FAILOVER_AFTER).to_string(),
                ])
                .args(["--grace-period", grace, "--idle-backoff-max", "500ms"])
                .args(["--shard-concurrency", "4", "--mark-concurrency", "4"])
                .args(["--shutdown-timeout", "5s"])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn relay-poller run");
            let mut stderr = child.stderr.take().expect("piped");
            let lines = tokio::spawn(async move {
                let mut out = String::new();
                let _ = stderr.read_to_string(&mut out).await;
                out
            });
            Self { child, lines }
        }

        /// Stops it as ECS does (SIGTERM), and waits: its log and metric lines.
        async fn stop(mut self) -> String {
            outbox_tests::sigterm(&self.child);
            let status = self.child.wait().await.unwrap();
            let lines = self.lines.await.unwrap();
            assert!(status.success(), "relay-poller run: {status}\n{lines}");
            lines
        }

        fn pid(&self) -> u32 {
            self.child.id().expect("running")
        }

        /// Kills it (SIGKILL: the region's relays die with their leases held).
        async fn kill(mut self) {
            self.child.kill().await.expect("kill");
        }
    }

    /// A `relay-stream-local` in one region, reading the region's stream from its start (as a
    /// Lambda mapping resumes from its checkpoint, and earlier still): the records it left to
    /// another region's pollers counted as its log reports them.
    struct StreamRelay {
        child: Child,
        left: std::sync::Arc<std::sync::atomic::AtomicU64>,
        lines: tokio::task::JoinHandle<String>,
    }

    impl StreamRelay {
        fn start(env: &GlobalTestEnv, region: &RegionEnv, lease_table: &str) -> Self {
            let regions: Vec<String> = env.regions.iter().map(|r| r.region.to_string()).collect();
            let mut child = env
                .relay_command("relay-stream-local", region)
                .args(["--regions", &regions.join(",")])
                .args(["--lease-table", lease_table])
                .args(["--from", "trim-horizon"])
                .env("RUST_LOG", "warn,relay_stream=info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn relay-stream-local");
            let left = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let stderr = child.stderr.take().expect("piped");
            let counted = left.clone();
            let lines = tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut out = String::new();
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let fields = serde_json::from_str::<serde_json::Value>(&line)
                        .ok()
                        .and_then(|doc| doc.get("fields").cloned());
                    if let Some(n) = fields
                        .filter(|f| f["message"] == "batch handled")
                        .and_then(|f| f["left_to_hold"].as_u64())
                    {
                        counted.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
                    }
                    out.push_str(&line);
                    out.push('\n');
                }
                out
            });
            Self { child, left, lines }
        }

        /// Waits until it has left `count` records to another region's pollers.
        async fn wait_left(&self, count: u64) {
            let start = Instant::now();
            while self.left.load(std::sync::atomic::Ordering::SeqCst) < count {
                assert!(
                    start.elapsed() < BOUND,
                    "the stream relay left {} of {count} records within {BOUND:?}",
                    self.left.load(std::sync::atomic::Ordering::SeqCst)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        /// Stops it (SIGTERM) and waits: its summary (`relay-stream-local` prints it on exit).
        async fn stop(mut self) -> serde_json::Value {
            outbox_tests::sigterm(&self.child);
            let mut stdout = String::new();
            let mut out = self.child.stdout.take().expect("piped");
            out.read_to_string(&mut stdout).await.unwrap();
            let status = self.child.wait().await.unwrap();
            let lines = self.lines.await.unwrap();
            assert!(status.success(), "relay-stream-local: {status}\n{lines}");
            serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{lines}"))
        }
    }

    fn writer(env: &GlobalTestEnv, region: &RegionEnv) -> OutboxWriter {
        let mut config = WriterConfig::new(OutboxConfig::new(&env.env.table_name), TEST_SOURCE);
        config.global_table = true;
        OutboxWriter::new(region.dynamodb.clone(), config).expect("a valid writer configuration")
    }

    /// Creates `ORDERS` orders named `{phase}-{i}` in `region`, each confirmed after: two events
    /// an aggregate, in order. The number of events written.
    async fn write_orders(env: &GlobalTestEnv, region: &RegionEnv, phase: &str) -> usize {
        let writer = writer(env, region);
        for i in 0..ORDERS {
            create(&writer, phase, i).await;
            confirm(&writer, phase, i).await;
        }
        2 * ORDERS
    }

    /// Creates order `{phase}-{i}`.
    async fn create(writer: &OutboxWriter, phase: &str, i: usize) {
        let (user, id) = (format!("user-{phase}-{i}"), format!("{phase}-{i}"));
        let order = NewOrder::new(vec![OrderLine::new("SKU-1", 1, 500)]).with_order_id(&id);
        writer
            .create_order_with_outbox(&user, order)
            .await
            .expect("order created");
    }

    /// As [`write_orders`], with `pause` after each write: an order may be created before a
    /// switch of publisher and confirmed after it.
    async fn write_orders_paced(
        env: GlobalTestEnv,
        region: RegionEnv,
        phase: &'static str,
        pause: Duration,
    ) -> usize {
        let writer = writer(&env, &region);
        for i in 0..ORDERS {
            create(&writer, phase, i).await;
            tokio::time::sleep(pause).await;
            confirm(&writer, phase, i).await;
            tokio::time::sleep(pause).await;
        }
        2 * ORDERS
    }

    async fn confirm(writer: &OutboxWriter, phase: &str, i: usize) {
        set_status(writer, phase, i, OrderStatus::Confirmed).await;
    }

    async fn set_status(writer: &OutboxWriter, phase: &str, i: usize, status: OrderStatus) {
        let (user, id) = (format!("user-{phase}-{i}"), format!("{phase}-{i}"));
        writer
            .update_order_status_with_outbox(&user, &id, status)
            .await
            .expect("status changed");
    }

    /// What the consumers received so far, kept across reads.
    #[derive(Default)]
    struct Sink {
        messages: Vec<SinkMessage>,
    }

    impl Sink {
        fn unique(&self) -> usize {
            self.messages
                .iter()
                .map(SinkMessage::event_id)
                .collect::<HashSet<_>>()
                .len()
        }

        /// Reads the queue until it holds `count` distinct events.
        async fn wait_for(&mut self, env: &GlobalTestEnv, count: usize, what: &str) {
            let start = Instant::now();
            while self.unique() < count {
                self.messages.extend(env.env.drain_sink().await);
                assert!(
                    start.elapsed() < BOUND,
                    "{what}: {} of {count} events reached the consumers in {BOUND:?}",
                    self.unique()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }

        /// Per aggregate, the sequences in the order their first copies arrived; the aggregates
        /// whose sequences are not ascending.
        fn out_of_order(&self) -> Vec<(String, Vec<u64>)> {
            let mut seen = HashSet::new();
            let mut by_aggregate: BTreeMap<String, Vec<u64>> = BTreeMap::new();
            for m in &self.messages {
                if seen.insert(m.event_id()) {
                    let meta = &m.envelope.metadata;
                    by_aggregate
                        .entry(meta.aggregate_id.clone().expect("aggregate id"))
                        .or_default()
                        .push(meta.sequence.expect("sequence"));
                }
            }
            by_aggregate
                .into_iter()
                .filter(|(_, sequences)| !sequences.is_sorted())
                .collect()
        }
    }

    /// The region publishing `of`'s partitions by `region`'s replica of the lease table: its
    /// adopter, or `of` itself.
    async fn publisher_of(region: &RegionEnv, lease_table: &str, of: &Region) -> String {
        region_items(region, lease_table)
            .await
            .publisher_of(of)
            .to_string()
    }

    /// The region items of `region`'s replica of the lease table, read as the pollers read them.
    async fn region_items(region: &RegionEnv, lease_table: &str) -> RegionView {
        DynamoRegionStore::new(region.dynamodb.clone(), lease_table)
            .read()
            .await
            .expect("read the region items")
    }

    /// By `region`'s replica: when `of`'s last heartbeat was written, and when its adoption last
    /// changed (epoch milliseconds, the writers' clocks: one machine's here).
    async fn adoption_times(region: &RegionEnv, lease_table: &str, of: &Region) -> (i64, i64) {
        let view = region_items(region, lease_table).await;
        (
            view.heartbeats
                .get(of)
                .expect("the region's heartbeat")
                .heartbeat_at,
            view.adoptions
                .get(of)
                .expect("the region's adoption")
                .changed_at,
        )
    }

    /// Waits until the poller of process `pid` holds a lease in `region`'s replica.
    async fn wait_leases_held(region: &RegionEnv, lease_table: &str, pid: u32) {
        let start = Instant::now();
        let marker = format!("-{pid}-");
        loop {
            let held = region
                .scan_items(lease_table)
                .await
                .iter()
                .filter(|item| {
                    item.get(region_attr::LEASE_KEY)
                        .and_then(|k| k.as_s().ok())
                        .is_some_and(|k| k.starts_with("SHARD#"))
                })
                .any(|item| {
                    item.get(region_attr::OWNER)
                        .and_then(|o| o.as_s().ok())
                        .is_some_and(|o| o.contains(&marker))
                });
            if held {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "the poller {pid} took no lease in {} within {BOUND:?}",
                region.region
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_publisher(region: &RegionEnv, lease_table: &str, of: &Region, by: &Region) {
        let start = Instant::now();
        while publisher_of(region, lease_table, of).await != by.as_str() {
            assert!(
                start.elapsed() < BOUND,
                "{by} did not come to publish {of} within {BOUND:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_regions_events_are_published_once_in_order_through_its_death_its_cut_and_its_return()
    {
        let env = GlobalTestEnv::with_target(TargetKind::Custom).await;
        let lease_table = unique_name("leases");
        env.create_lease_table(&lease_table).await;
        env.dead_letter_queue_in_every_region().await;
        let (a, b) = (env.a(), env.b());
        let mut sink = Sink::default();

        // Given both regions up, each with its poller, and orders written in both
        let pa = Poller::start(&env, a, &lease_table);
        let pb = Poller::start(&env, b, &lease_table);
        let mut written = write_orders(&env, a, "up-a").await;
        written += write_orders(&env, b, "up-b").await;

        // Then each event reaches the consumers, and the two regions published each once
        sink.wait_for(&env, written, "both regions up").await;
        let (la, lb) = (pa.stop().await, pb.stop().await);
        let published = metric_sum(&la, relay_runtime::metrics::PUBLISHED)
            + metric_sum(&lb, relay_runtime::metrics::PUBLISHED);
        assert_eq!(published, written as u64, "published by both regions");
        assert!(metric_sum(&lb, relay_runtime::metrics::PUBLISHED) > 0);

        // When b's relays die (killed once they hold their leases again) and b's writer goes on
        let written_before = written;
        env.replicator.wait_caught_up().await;
        let pa = Poller::start(&env, a, &lease_table);
        let pb = Poller::start(&env, b, &lease_table);
        wait_leases_held(b, &lease_table, pb.pid()).await;
        pb.kill().await;
        written += write_orders(&env, b, "dead-b").await;

        // Then a adopts b once b's last heartbeat is the failover time old, and publishes b's
        // replicated events
        wait_publisher(a, &lease_table, &b.region, &a.region).await;
        let (last_heartbeat, adopted) = adoption_times(a, &lease_table, &b.region).await;
        assert!(
            adopted - last_heartbeat >= FAILOVER_AFTER.as_millis() as i64,
            "adopted {} ms after b's last heartbeat",
            adopted - last_heartbeat
        );
        sink.wait_for(&env, written, "b's events published by a")
            .await;

        // When b is also cut off while its writer goes on: new orders, and the second events of
        // orders a has published the first of, are stranded in b
        env.replicator.isolate(&b.region, &env.regions).await;
        written += write_orders(&env, b, "cut-b").await;
        let b_writer = writer(&env, b);
        for i in 0..ORDERS {
            // A third event for each order of the "dead-b" phase
            set_status(&b_writer, "dead-b", i, OrderStatus::Paid).await;
        }
        written += ORDERS;

        // And b comes back: its link restored, its stream relay reading b's stream from its start
        // (every event b's writer wrote, the published ones too) while a still publishes b
        env.replicator.reconnect(&b.region, &env.regions).await;
        // (once b's replica holds a's adoption of b, which the stream relay reads there; not
        // "replication caught up": a's poller writes the lease table every round)
        wait_publisher(b, &lease_table, &b.region, &a.region).await;
        let sb = StreamRelay::start(&env, b, &lease_table);
        // (up-b's, dead-b's and cut-b's two events an order, and dead-b's third ones)
        let b_records = (3 * 2 * ORDERS + ORDERS) as u64;

        // Then it leaves every record of b's to a's pollers, publishing none
        sb.wait_left(b_records).await;

        // When b's poller starts again, and b's writer writes orders across the hand-back (an
        // order created while a publishes b, confirmed after)
        let pb = Poller::with_grace(&env, b, &lease_table, "2s");
        let across = tokio::spawn(write_orders_paced(
            env.clone(),
            b.clone(),
            "across-b",
            Duration::from_millis(250),
        ));

        // Then its stranded events are published once, after what a published of their orders,
        // and b gets its own partitions back
        sink.wait_for(&env, written, "b's stranded events").await;
        wait_publisher(a, &lease_table, &b.region, &b.region).await;
        wait_publisher(b, &lease_table, &b.region, &b.region).await;

        // And what b's writer writes from then on is published (by b)
        written += across.await.expect("the writer across the hand-back");
        written += write_orders(&env, b, "back-b").await;
        sink.wait_for(&env, written, "b's events after the hand-back")
            .await;
        let (la, lb, sb) = (pa.stop().await, pb.stop().await, sb.stop().await);
        let (by_a, by_b) = (
            metric_sum(&la, relay_runtime::metrics::PUBLISHED),
            metric_sum(&lb, relay_runtime::metrics::PUBLISHED),
        );
        let by_stream = sb["published"].as_u64().expect("the summary's published");
        assert!(
            by_b + by_stream >= 2 * ORDERS as u64,
            "b publishes its own again"
        );
        // And b's stream relay published none of what b's writer wrote before it came back: at
        // most the orders written across and after the hand-back
        assert!(
            by_stream <= 4 * ORDERS as u64,
            "b's stream relay published {by_stream} events: {sb}"
        );
        let by_b = by_b + by_stream;
        // And through the failover and the hand-back the regions published every event, each
        // once but for those pending in both regions at a switch: at most the events b's writer
        // wrote while b was adopted (an adopter's mark reaching b after the hand-back's round,
        // docs/global-tables.md, "What the window costs"; how many on a quiet machine is measured
        // in docs/benchmarks.md, "Global tables"). b's killed poller published nothing: nothing
        // was pending when it died.
        let since = (written - written_before) as u64;
        let while_adopted = (7 * ORDERS) as u64;
        assert!(
            (since..=since + while_adopted).contains(&(by_a + by_b)),
            "{since} events written since both were up, published {by_a} by a and {by_b} by b"
        );

        // And, where the consumers see it: none missing, none out of order
        assert_eq!(sink.unique(), written, "none missing");
        assert_eq!(sink.out_of_order(), Vec::new(), "out of order");
    }

    /// Events pending (indexed) in `region`'s replica of the outbox table.
    async fn pending_in(env: &GlobalTestEnv, region: &RegionEnv) -> Vec<String> {
        region
            .scan_items(&env.env.table_name)
            .await
            .into_iter()
            .filter(|item| item.contains_key(outbox_shared::schema::attr::GSI1PK))
            .filter_map(|item| {
                item.get(outbox_shared::schema::attr::EVENT_ID)?
                    .as_s()
                    .ok()
                    .cloned()
            })
            .collect()
    }

    async fn wait_none_pending(env: &GlobalTestEnv, region: &RegionEnv, what: &str) {
        let start = Instant::now();
        loop {
            let pending = pending_in(env, region).await;
            if pending.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "{what}: {} events still pending in {} after {BOUND:?}: {pending:?}",
                pending.len(),
                region.region
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn two_regions_cut_apart_publish_and_mark_the_same_events_and_last_writer_wins_loses_none()
     {
        let env = GlobalTestEnv::with_target(TargetKind::Custom).await;
        let lease_table = unique_name("leases");
        env.create_lease_table(&lease_table).await;
        env.dead_letter_queue_in_every_region().await;
        let (a, b) = (env.a(), env.b());
        let mut sink = Sink::default();

        // Given orders written in a and replicated to b, no relay running yet
        let mut written = write_orders(&env, a, "race").await;
        env.replicator.wait_caught_up().await;
        assert_eq!(pending_in(&env, b).await.len(), written);

        // When the link is cut and both regions' pollers run: a publishes its own events, and b,
        // no longer hearing a's heartbeat, adopts a and publishes them again from its replica,
        // each region marking them in its own (conditions checked there only)
        env.replicator.isolate(&b.region, &env.regions).await;
        let pa = Poller::start(&env, a, &lease_table);
        let pb = Poller::start(&env, b, &lease_table);
        sink.wait_for(&env, written, "a's events published").await;
        wait_publisher(b, &lease_table, &a.region, &b.region).await;
        wait_none_pending(&env, b, "b publishing a's events").await;
        wait_none_pending(&env, a, "a publishing its own").await;
        // And a's writer goes on meanwhile: events only a's replica holds
        written += write_orders(&env, a, "race-cut").await;
        for i in 0..ORDERS {
            set_status(&writer(&env, a), "race", i, OrderStatus::Paid).await;
        }
        written += ORDERS;

        // And the link is restored: each mark replicates, the later one wins per item
        env.replicator.reconnect(&b.region, &env.regions).await;

        // Then no event is lost: every one reaches the consumers, in order, and none is left
        // pending in either replica
        sink.wait_for(&env, written, "every event after the race")
            .await;
        wait_none_pending(&env, a, "after the race").await;
        wait_none_pending(&env, b, "after the race").await;
        let (la, lb) = (pa.stop().await, pb.stop().await);
        assert!(
            metric_sum(&lb, relay_runtime::metrics::PUBLISHED) >= 2 * ORDERS as u64,
            "b published a's events too: the race took place"
        );
        drop(la);
        assert_eq!(sink.unique(), written, "none missing");
        assert_eq!(sink.out_of_order(), Vec::new(), "out of order");
    }
}
