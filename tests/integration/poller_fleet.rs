//! A fleet of `relay-poller run` processes sharing the shards through a lease table, against the
//! local emulator with short lease periods: the split converges to the fair share, events written
//! while the fleet runs reach the sink once each, a joining poller gets its share without leaving
//! a shard unpolled, and a poller killed or stopped has its shards taken over in time.
//!
//! One test walks through the phases in order (each builds on the fleet the previous one left),
//! so the suite pays for one fleet, not five.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use chrono::Utc;
use futures::StreamExt;
use outbox_shared::schema;
use outbox_shared::{NewOutboxEvent, OutboxItem};
use outbox_tests::{TestEnv, unique_name};
use relay_poller::assignment::attr;
use tokio::process::Child;

/// Short periods, so the "within N lease periods" are seconds; long enough that a lease
/// call waiting behind the rest of the suite on the local emulators still renews in time.
const LEASE_DURATION: Duration = Duration::from_secs(10);
const RENEW_INTERVAL: Duration = Duration::from_secs(2);
const SHARDS: u16 = 16;
/// `BatchWriteItem` takes at most 25 items.
const BATCH_WRITE_MAX: usize = 25;
/// How often the lease table is looked at while waiting for a condition.
const POLL: Duration = Duration::from_millis(200);
/// Bound for the sink to receive what was written; only reached when something is broken.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(180);
/// Bound for a started poller to write its first heartbeat (process start, the lease table
/// created or found); the periods count from there. Only reached when something is broken,
/// or the emulator is swamped by other tests.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

fn periods(n: u32) -> Duration {
    LEASE_DURATION * n
}

/// One shard's lease as the table holds it.
#[derive(Debug, Clone)]
struct LeaseRow {
    owner: Option<String>,
    expires_at: i64,
    last_pass_at: Option<i64>,
}

impl LeaseRow {
    /// The owner, if the lease has not expired.
    fn holder(&self, now: i64) -> Option<&str> {
        self.owner.as_deref().filter(|_| self.expires_at > now)
    }
}

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<i64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

/// The process id an owner id carries (`{host}-{pid}-{suffix}` off ECS).
fn pid_of(owner: &str) -> Option<u32> {
    owner.rsplit('-').nth(1)?.parse().ok()
}

struct Fleet {
    env: TestEnv,
    lease_table: String,
    pollers: Vec<Child>,
}

impl Fleet {
    fn spawn(&mut self) -> u32 {
        let child = self
            .env
            .relay_command("relay-poller")
            .arg("run")
            .args(["--lease-table", &self.lease_table, "--create-lease-table"])
            .args([
                "--lease-duration",
                &humantime::format_duration(LEASE_DURATION).to_string(),
            ])
            .args([
                "--lease-renew-interval",
                &humantime::format_duration(RENEW_INTERVAL).to_string(),
            ])
            .args(["--grace-period", "0s", "--idle-backoff-max", "1s"])
            // Fewer calls in flight per poller: the local emulators share two cores with the rest
            // of the suite (moto serves one request at a time), and a lease renewal waits behind
            // every call queued before it.
            .args(["--shard-concurrency", "4", "--mark-concurrency", "4"])
            .args(["--publish-concurrency", "2", "--shutdown-timeout", "5s"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn relay-poller run");
        let pid = child.id().expect("pid");
        self.pollers.push(child);
        pid
    }

    fn child(&mut self, pid: u32) -> Child {
        let at = self
            .pollers
            .iter()
            .position(|c| c.id() == Some(pid))
            .expect("a poller with that pid");
        self.pollers.remove(at)
    }

    /// Every item of the lease table (none before the first poller created it).
    async fn table_items(&self) -> Vec<HashMap<String, AttributeValue>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .env
                .dynamodb
                .scan()
                .table_name(&self.lease_table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await;
            let page = match page {
                Ok(page) => page,
                Err(err)
                    if err
                        .as_service_error()
                        .is_some_and(|e| e.is_resource_not_found_exception()) =>
                {
                    return Vec::new();
                }
                Err(err) => panic!("scan of the lease table: {err:?}"),
            };
            items.extend(page.items().iter().cloned());
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return items;
            }
        }
    }

    /// Every shard's lease, and the time it was read (epoch milliseconds).
    async fn leases(&self) -> (BTreeMap<u16, LeaseRow>, i64) {
        let items = self.table_items().await;
        let now = Utc::now().timestamp_millis();
        let leases = items
            .iter()
            .filter_map(|item| {
                let key = item[attr::LEASE_KEY].as_s().ok()?;
                let shard = relay_poller::assignment::parse_partition_key(key)?;
                Some((
                    shard.shard,
                    LeaseRow {
                        owner: item.get(attr::OWNER).and_then(|o| o.as_s().ok()).cloned(),
                        expires_at: number(item, attr::EXPIRES_AT).unwrap_or_default(),
                        last_pass_at: number(item, attr::LAST_PASS_AT),
                    },
                ))
            })
            .collect();
        (leases, now)
    }

    /// Waits until every poller of `pids` has written its heartbeat.
    async fn wait_announced(&self, pids: &[u32]) {
        let started = Instant::now();
        loop {
            let announced: HashSet<u32> = self
                .table_items()
                .await
                .iter()
                .filter_map(|item| item[attr::LEASE_KEY].as_s().ok())
                .filter_map(|key| relay_poller::assignment::parse_poller_key(key))
                .filter_map(pid_of)
                .collect();
            if pids.iter().all(|p| announced.contains(p)) {
                return;
            }
            assert!(
                started.elapsed() < STARTUP_TIMEOUT,
                "pollers {pids:?} did not announce themselves within {STARTUP_TIMEOUT:?}: {announced:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Unexpired leases per poller (by pid), and how many shards have no unexpired lease.
    async fn holdings(&self) -> (BTreeMap<u32, usize>, usize) {
        let (leases, now) = self.leases().await;
        let mut held: BTreeMap<u32, usize> = BTreeMap::new();
        let mut unheld = SHARDS as usize;
        for lease in leases.values() {
            if let Some(owner) = lease.holder(now) {
                *held
                    .entry(pid_of(owner).expect("owner id carries a pid"))
                    .or_default() += 1;
                unheld -= 1;
            }
        }
        (held, unheld)
    }

    /// Waits until `done` holds for the holdings, or `limit` passes; how long it took, or the
    /// last holdings seen.
    async fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&BTreeMap<u32, usize>, usize) -> bool,
    ) -> Result<Duration, (BTreeMap<u32, usize>, usize)> {
        let started = Instant::now();
        loop {
            let (held, unheld) = self.holdings().await;
            if done(&held, unheld) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > limit {
                return Err((held, unheld));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Each of `pids` holds between `low` and `high` leases, nobody else holds one, and every shard
/// is held.
fn split_among(
    pids: &[u32],
    low: usize,
    high: usize,
) -> impl Fn(&BTreeMap<u32, usize>, usize) -> bool {
    let pids: Vec<u32> = pids.to_vec();
    move |held, unheld| {
        unheld == 0
            && held.len() == pids.len()
            && pids
                .iter()
                .all(|p| held.get(p).is_some_and(|&n| n >= low && n <= high))
    }
}

/// Writes `count` pending events (one per aggregate, spread over the shards) as a client would.
async fn write_events(env: &TestEnv, count: usize) -> Vec<OutboxItem> {
    let config = env.outbox_config();
    let items: Vec<OutboxItem> = (0..count)
        .map(|i| {
            let event = NewOutboxEvent {
                partition_key: schema::user_pk(&format!("user-{}", i % 50)),
                event_type: "OrderCreated".into(),
                aggregate_type: "Order".into(),
                aggregate_id: unique_name("order"),
                sequence: Some(1),
                payload: serde_json::json!({"n": i}),
                trace_header: None,
                trace_context: None,
            };
            OutboxItem::pending(event, &config, Utc::now()).unwrap()
        })
        .collect();
    let puts = items
        .iter()
        .map(|item| {
            let put = PutRequest::builder()
                .set_item(Some(item.to_item().unwrap()))
                .build()
                .unwrap();
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    batch_write(env, puts).await;
    items
}

fn event_ids(items: &[OutboxItem]) -> HashSet<String> {
    items.iter().map(|i| i.event_id.clone()).collect()
}

async fn batch_write(env: &TestEnv, requests: Vec<WriteRequest>) {
    futures::stream::iter(requests.chunks(BATCH_WRITE_MAX))
        .for_each_concurrent(4, |chunk| async move {
            let mut requests = chunk.to_vec();
            while !requests.is_empty() {
                let out = env
                    .dynamodb
                    .batch_write_item()
                    .request_items(&env.table_name, requests)
                    .send()
                    .await
                    .expect("batch write");
                requests = out
                    .unprocessed_items()
                    .and_then(|u| u.get(&env.table_name))
                    .cloned()
                    .unwrap_or_default();
            }
        })
        .await;
}

/// Every event id delivered to the sink so far, with how often.
#[derive(Debug, Default)]
struct Sink(HashMap<String, u64>);

impl Sink {
    async fn collect(&mut self, env: &TestEnv) {
        for message in env.drain_sink().await {
            *self.0.entry(message.event_id().to_owned()).or_default() += 1;
        }
    }

    /// Collects until every id of `written` arrived and the index is empty (nothing more is on
    /// its way), or the delivery timeout passes.
    async fn wait_for_all(&mut self, env: &TestEnv, written: &HashSet<String>) {
        let started = Instant::now();
        loop {
            self.collect(env).await;
            let arrived = written.iter().all(|id| self.0.contains_key(id));
            if arrived && env.pending_in_index().await == 0 {
                self.collect(env).await;
                return;
            }
            if started.elapsed() > DELIVERY_TIMEOUT {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn missing(&self, written: &HashSet<String>) -> usize {
        written
            .iter()
            .filter(|id| !self.0.contains_key(*id))
            .count()
    }

    fn duplicated(&self, written: &HashSet<String>) -> usize {
        written
            .iter()
            .filter(|id| self.0.get(*id).is_some_and(|&n| n > 1))
            .count()
    }
}

/// `LastPassAt` values per shard, in the order they appeared.
type Passes = Arc<Mutex<BTreeMap<u16, Vec<i64>>>>;

/// Samples the lease table while a poller joins: per shard, the `LastPassAt` values in the order
/// they appeared (each is a pass over the shard that finished, recorded by its holder).
fn watch_passes(fleet: &Fleet) -> (Passes, tokio::sync::oneshot::Sender<()>) {
    let seen: Passes = Arc::default();
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let watcher = Fleet {
        env: fleet.env.clone(),
        lease_table: fleet.lease_table.clone(),
        pollers: Vec::new(),
    };
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let (leases, _) = watcher.leases().await;
            {
                let mut record = record.lock().unwrap();
                for (shard, lease) in leases {
                    let Some(at) = lease.last_pass_at else {
                        continue;
                    };
                    let passes = record.entry(shard).or_default();
                    if passes.last() != Some(&at) {
                        passes.push(at);
                    }
                }
            }
            tokio::select! {
                _ = &mut stopped => return,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    (seen, stop)
}

/// `relay-poller status --json` for the fleet's tables.
async fn status_json(fleet: &Fleet) -> serde_json::Value {
    let output = fleet
        .env
        .relay_command("relay-poller")
        .args(["status", "--json", "--lease-table", &fleet.lease_table])
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("relay-poller status");
    assert!(output.status.success(), "{:?}", output.status);
    serde_json::from_slice(&output.stdout).expect("status JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poller_fleet_shares_the_shards_hands_them_over_and_takes_them_over() {
    let env = TestEnv::new().await;
    let mut fleet = Fleet {
        env: env.clone(),
        lease_table: unique_name("leases"),
        pollers: Vec::new(),
    };
    let mut sink = Sink::default();

    // Given three pollers started together on 16 shards, each announced (its first heartbeat)
    let first: Vec<u32> = (0..3).map(|_| fleet.spawn()).collect();
    fleet.wait_announced(&first).await;

    // Then within three lease periods each holds 5 or 6 leases, every shard exactly one holder
    let took = fleet
        .wait_for(periods(3), split_among(&first, 5, 6))
        .await
        .unwrap_or_else(|last| panic!("no 5/6 split within 3 lease periods: {last:?}"));
    eprintln!("poller_fleet: 3 pollers split 16 shards in {took:?}");

    // And `status --json` shows each shard's owner and the three live pollers
    let status = status_json(&fleet).await;
    let shards = status["leases"]["shards"]
        .as_array()
        .expect("leases.shards");
    assert_eq!(shards.len(), SHARDS as usize);
    for shard in shards {
        let owner = shard["owner"].as_str().expect("every shard has an owner");
        assert!(first.contains(&pid_of(owner).unwrap()), "{shard}");
        let age = shard["lease_age_seconds"].as_f64().unwrap();
        assert!(age < LEASE_DURATION.as_secs_f64(), "{shard}");
    }
    let live = status["leases"]["live_pollers"].as_array().unwrap();
    assert_eq!(live.len(), 3, "{live:?}");
    assert!(
        live.iter()
            .all(|p| (5..=6).contains(&p["shards_owned"].as_u64().unwrap()))
    );

    // And a drain that respects the leases leaves every held shard to its poller
    let output = env
        .relay_command("relay-poller")
        .args([
            "drain",
            "--lease-table",
            &fleet.lease_table,
            "--respect-leases",
        ])
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("drain --respect-leases");
    assert!(output.status.success(), "{:?}", output.status);
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        summary["skipped_shards"],
        serde_json::json!((0..SHARDS).collect::<Vec<_>>()),
        "{summary}"
    );

    // When 2,000 events are written while they run
    let started = Instant::now();
    let written = write_events(&env, 2000).await;
    let batch = event_ids(&written);
    sink.wait_for_all(&env, &batch).await;
    eprintln!(
        "poller_fleet: 2,000 events written and delivered in {:?}",
        started.elapsed()
    );

    // Then every one reaches the sink exactly once
    assert_eq!(
        (sink.missing(&batch), sink.duplicated(&batch)),
        (0, 0),
        "missing, duplicated of 2,000"
    );
    assert_eq!(sink.0.len(), 2000);

    // When a fourth poller joins
    let (passes, stop_watching) = watch_passes(&fleet);
    let joined_at = Utc::now().timestamp_millis();
    let fourth = fleet.spawn();
    fleet.wait_announced(&[fourth]).await;
    let all: Vec<u32> = first.iter().copied().chain([fourth]).collect();

    // Then within a few lease periods all four hold 4 leases each
    let took = fleet
        .wait_for(periods(4), split_among(&all, 4, 4))
        .await
        .unwrap_or_else(|last| {
            panic!("the 4th did not get its 4 within 4 lease periods: {last:?}")
        });
    eprintln!("poller_fleet: a 4th poller got its 4 shards in {took:?}");

    // And every shard is polled again after the split (each records a pass newer than it)
    let split_at = Utc::now().timestamp_millis();
    let started = Instant::now();
    loop {
        let (leases, _) = fleet.leases().await;
        if leases
            .values()
            .all(|l| l.last_pass_at.is_some_and(|at| at > split_at))
        {
            break;
        }
        assert!(
            started.elapsed() < LEASE_DURATION,
            "shards without a pass within a lease period of the split: {:?}",
            leases
                .iter()
                .filter(|(_, l)| l.last_pass_at.is_none_or(|at| at <= split_at))
                .map(|(s, _)| s)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(POLL).await;
    }
    stop_watching.send(()).ok();

    // And meanwhile no shard went unpolled for longer than one lease period: between two passes
    // over a shard recorded since the join, by whichever poller held it
    let passes = passes.lock().unwrap().clone();
    assert_eq!(
        passes.len(),
        SHARDS as usize,
        "a shard never recorded a pass"
    );
    let mut longest = 0;
    for at in passes.values() {
        let since_join: Vec<i64> = at.iter().copied().filter(|&t| t >= joined_at).collect();
        for pair in since_join.windows(2) {
            longest = longest.max(pair[1] - pair[0]);
        }
    }
    eprintln!("poller_fleet: longest a shard went unpolled while the 4th joined: {longest} ms");
    assert!(
        longest <= LEASE_DURATION.as_millis() as i64,
        "a shard went unpolled for {longest} ms"
    );

    // When one poller is killed with SIGKILL while events are being published
    let batch = event_ids(&write_events(&env, 300).await);
    let victim = all[1];
    fleet.child(victim).kill().await.expect("SIGKILL");
    let killed_at = Instant::now();

    // Then within two lease periods its shards are held by the other three
    let survivors: Vec<u32> = all.iter().copied().filter(|&p| p != victim).collect();
    let took = fleet
        .wait_for(
            periods(2).saturating_sub(killed_at.elapsed()),
            split_among(&survivors, 4, 6),
        )
        .await
        .unwrap_or_else(|last| {
            panic!("the killed poller's shards were not taken within 2 lease periods: {last:?}")
        });
    eprintln!("poller_fleet: a SIGKILLed poller's shards were taken in {took:?}");

    // And none of the events is missing (a duplicate is allowed: it may have died mid-publish)
    sink.wait_for_all(&env, &batch).await;
    assert_eq!(
        sink.missing(&batch),
        0,
        "missing of 300 written around the kill"
    );

    // When another is stopped with SIGTERM
    let stopped = survivors[0];
    let mut child = fleet.child(stopped);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &stopped.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("exit status");
    assert!(exit.success(), "{exit:?}");
    let exited_at = Instant::now();

    // Then its leases were released as it stopped: none is its, none expired on its own
    let (leases, now) = fleet.leases().await;
    let its: Vec<u16> = leases
        .iter()
        .filter(|(_, l)| l.owner.as_deref().and_then(pid_of) == Some(stopped) && l.expires_at > now)
        .map(|(s, _)| *s)
        .collect();
    assert!(its.is_empty(), "still held by the stopped poller: {its:?}");

    // And within one lease period the remaining two hold all 16
    let remaining: Vec<u32> = survivors[1..].to_vec();
    let took = fleet
        .wait_for(
            periods(1).saturating_sub(exited_at.elapsed()),
            split_among(&remaining, 8, 8),
        )
        .await
        .unwrap_or_else(|last| {
            panic!("the released shards were not taken within one lease period: {last:?}")
        });
    eprintln!("poller_fleet: a SIGTERMed poller's shards were taken {took:?} after it exited");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_without_its_lease_table_exits_non_zero_naming_it() {
    // Given no lease table, and no --create-lease-table
    let env = TestEnv::new().await;
    let missing = unique_name("no-leases");

    // When a poller is started on it
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        env.relay_command("relay-poller")
            .args(["run", "--lease-table", &missing])
            .env("RUST_LOG", "off")
            .stdout(Stdio::null())
            .output(),
    )
    .await
    .expect("exits instead of polling without leases")
    .expect("relay-poller run");

    // Then it exits 2 (misconfigured) and says which table is missing and how to create it
    assert_eq!(output.status.code(), Some(2), "{:?}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&missing), "{stderr}");
    assert!(stderr.contains("--create-lease-table"), "{stderr}");
}

#[tokio::test]
async fn a_hand_over_whose_reply_was_lost_leaves_the_holder_stopped_while_the_requester_adopts_it()
{
    use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
    use relay_poller::ShardAssignment;
    use relay_poller::assignment::PageStart;
    use relay_poller::assignment::{
        DynamoLeaseStore, LeaseManager, LeaseSettings, SystemClock, create_lease_table,
    };

    const UPDATE_ITEM: &str = "DynamoDB_20120810.UpdateItem";

    // Given a holds both shards of two, through a proxy that can lose its replies, and b has asked
    // it for one
    let env = TestEnv::new().await;
    let table = unique_name("leases");
    create_lease_table(&env.dynamodb, &table).await.unwrap();
    let proxy = FaultProxy::start(&outbox_tests::emulator_endpoints(), FaultRates::NONE, 7).await;
    let through_proxy = env.dynamodb_through(&proxy);
    let settings = LeaseSettings {
        table_name: table.clone(),
        duration: LEASE_DURATION,
        renew_interval: RENEW_INTERVAL,
        create_table: false,
    };
    let manager = |client, owner: &str| {
        LeaseManager::new(
            DynamoLeaseStore::new(client, &table),
            SystemClock,
            owner,
            vec![0.into(), 1.into()],
            settings.clone(),
        )
    };
    let a = manager(through_proxy, "a");
    let b = manager(env.dynamodb.clone(), "b");
    let (a_polls, b_polls) = (a.assignment(), b.assignment());
    a.round().await.unwrap();
    a.round().await.unwrap();
    assert_eq!(a.owned().len(), 2);
    b.round().await.unwrap();
    let asked = b.round().await.unwrap().requested.expect("b asks for one");

    // When a hands it over once its page in flight ends, and the reply to that write is lost
    // after it took effect (the SDK retries it and DynamoDB answers ConditionalCheckFailed)
    let PageStart::Go { .. } = a_polls.begin_page(&asked) else {
        panic!("a polls shard {asked}");
    };
    let (renewed, ()) = tokio::join!(a.renew_round(), async {
        // a's renewals are made once it stops new pages of the shard it is asked for
        while let PageStart::Go { .. } = a_polls.begin_page(&asked) {
            a_polls.end_page(&asked);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        proxy.lose_next_replies(UPDATE_ITEM, 1);
        a_polls.end_page(&asked);
    });
    let renewed = renewed.unwrap();
    assert_eq!(proxy.counts_for(UPDATE_ITEM).lost_replies, 1);
    assert!(renewed.handed_over.is_empty(), "{renewed:?}");

    // Then b adopts it at its next round, and a does not poll it beside b
    let adopted = b.round().await.unwrap();
    assert_eq!(adopted.adopted, std::slice::from_ref(&asked), "{adopted:?}");
    assert!(matches!(b_polls.begin_page(&asked), PageStart::Go { .. }));
    assert_eq!(
        a_polls.begin_page(&asked),
        PageStart::Stop,
        "a polls shard {asked} beside b"
    );

    // And a's next renewal finds it lost, while it keeps the other
    let next = a.renew_round().await.unwrap();
    assert_eq!(next.lost, [asked], "{next:?}");
    assert_eq!(a.owned().len(), 1);
}
