//! The local global table: two regions, each its own DynamoDB Local, and the replicator between
//! them (`tools/global_table_replicator.py`), which `scripts/emulator.sh` starts when asked with
//! `EMULATOR_REGIONS` (`make test` asks for `us-east-1,eu-west-1`).
//!
//! [`GlobalTestEnv::new`] gives a test a [`TestEnv`] (its bus, sink and dead-letter queue on moto)
//! whose outbox table exists in both regions under the same name, so the replicator replicates it;
//! a [`RegionEnv`] per region with that region's DynamoDB clients and the variables that start a
//! relay process there (the standard `AWS_REGION`, `AWS_ENDPOINT_URL_DYNAMODB` and
//! `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`); and the replicator's [`Replicator`] control (cut, restore,
//! lag, wait until caught up). docs/testing.md ("The local global table") says what the replicator
//! is faithful to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_infra::template::{StreamSpec, TableSpec};
use outbox_infra::{Template, create_table_from};
use outbox_shared::Region;
use relay_runtime::TargetKind;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{TestEnv, local_http, read_stream, scan_table};

/// The emulator's variable listing the regions (`us-east-1,eu-west-1`).
pub const REGIONS_VARIABLE: &str = "OUTBOX_EMULATOR_REGIONS";
/// The emulator's variable with the replicator's control address.
pub const REPLICATOR_VARIABLE: &str = "OUTBOX_EMULATOR_REPLICATOR";

const HOW_TO_RUN: &str = "run the tests with `make test`, which starts a local global table of two \
     regions, or start the emulators with one: `EMULATOR_REGIONS=us-east-1,eu-west-1 \
     scripts/emulator.sh run -- cargo test -p outbox-tests --test integration …`";

/// How long a test waits for the replicator to catch up before it fails.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// The emulator's variable with `region`'s DynamoDB endpoint: `OUTBOX_EMULATOR_DYNAMODB_EU_WEST_1`.
pub fn endpoint_variable(region: &Region) -> String {
    format!(
        "OUTBOX_EMULATOR_DYNAMODB_{}",
        region.as_str().to_ascii_uppercase().replace('-', "_")
    )
}

/// The regions the emulator runs, each with its DynamoDB endpoint, in the order configured.
///
/// # Panics
/// With instructions when the emulator was started without `EMULATOR_REGIONS` (never a skip).
pub fn emulated_regions() -> Vec<(Region, String)> {
    let listed = std::env::var(REGIONS_VARIABLE).unwrap_or_default();
    let regions: Vec<Region> = listed
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| Region::new(r).unwrap_or_else(|e| panic!("{REGIONS_VARIABLE}: {e}")))
        .collect();
    assert!(
        regions.len() >= 2,
        "{REGIONS_VARIABLE} names no two regions ({listed:?}), so there is no local global table: {HOW_TO_RUN}"
    );
    regions
        .into_iter()
        .map(|region| {
            let variable = endpoint_variable(&region);
            let endpoint = std::env::var(&variable)
                .unwrap_or_else(|_| panic!("{variable} is not set: {HOW_TO_RUN}"));
            (region, endpoint)
        })
        .collect()
}

/// One region of the local global table: its DynamoDB Local and the global table's stream there.
#[derive(Debug, Clone)]
pub struct RegionEnv {
    pub region: Region,
    /// The region's DynamoDB (and DynamoDB Streams) endpoint.
    pub endpoint: String,
    /// The environment's SDK configuration in this region (its credentials; every other service
    /// still on the emulators' standard variables).
    pub sdk_config: SdkConfig,
    /// DynamoDB in this region.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// DynamoDB Streams in this region.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// The outbox table's stream in this region.
    pub stream_arn: String,
}

impl RegionEnv {
    fn new(env: &TestEnv, region: Region, endpoint: String) -> Self {
        let sdk_config = env
            .sdk_config
            .to_builder()
            .region(aws_config::Region::new(region.as_str().to_owned()))
            .build();
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk_config)
                .endpoint_url(&endpoint)
                .build(),
        );
        let streams = aws_sdk_dynamodbstreams::Client::from_conf(
            aws_sdk_dynamodbstreams::config::Builder::from(&sdk_config)
                .endpoint_url(&endpoint)
                .build(),
        );
        Self {
            region,
            endpoint,
            sdk_config,
            dynamodb,
            streams,
            stream_arn: String::new(),
        }
    }

    /// The standard variables that run a process in this region: `AWS_REGION` (and
    /// `AWS_DEFAULT_REGION`), and DynamoDB and its streams at this region's endpoint.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_REGION", self.region.to_string()),
            ("AWS_DEFAULT_REGION", self.region.to_string()),
            ("AWS_ENDPOINT_URL_DYNAMODB", self.endpoint.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", self.endpoint.clone()),
        ]
    }

    /// Every item of `table` in this region.
    pub async fn scan_items(&self, table: &str) -> Vec<HashMap<String, AttributeValue>> {
        scan_table(&self.dynamodb, table).await
    }

    /// Every record of the outbox table's stream in this region, from its start.
    pub async fn stream_records(&self) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
        read_stream(&self.streams, &self.stream_arn).await
    }
}

/// A test environment on the local global table: a [`TestEnv`] for the target and the queues,
/// its outbox table (`env.table_name`) in every region.
#[derive(Debug, Clone)]
pub struct GlobalTestEnv {
    /// The bus, sink and dead-letter queue (moto), the credentials, the relays' settings. Its own
    /// table on the default DynamoDB Local is not the global table: use [`Self::regions`].
    pub env: TestEnv,
    /// Every region, in the order the emulator lists them; the outbox table in each.
    pub regions: Vec<RegionEnv>,
    pub replicator: Replicator,
    /// Deletes the environment's tables from every region once the last clone is dropped.
    _tables: Arc<RegionTables>,
}

impl GlobalTestEnv {
    /// A [`TestEnv`] on the classic bus, its outbox table created in every region.
    ///
    /// # Panics
    /// With instructions when the emulator runs no global table; when a table can't be created.
    pub async fn new() -> Self {
        Self::with_target(TargetKind::Classic).await
    }

    /// Like [`new`](Self::new), publishing to a target of `kind` ([`TestEnv::with_target`]).
    ///
    /// # Panics
    /// As [`new`](Self::new).
    pub async fn with_target(kind: TargetKind) -> Self {
        let emulated = emulated_regions();
        let env = TestEnv::with_target(kind).await;
        let replicator = Replicator::from_env(vec![env.table_name.clone()]);
        let mut regions: Vec<RegionEnv> = emulated
            .into_iter()
            .map(|(region, endpoint)| RegionEnv::new(&env, region, endpoint))
            .collect();
        let spec = Template::embedded()
            .and_then(|t| t.outbox_table())
            .unwrap_or_else(|e| panic!("the template's outbox table: {e}"));
        for region in &mut regions {
            region.stream_arn = create_global_table(region, &env.table_name, &spec).await;
        }
        let tables = Arc::new(RegionTables {
            names: replicator.tables.clone(),
            clients: regions.iter().map(|r| r.dynamodb.clone()).collect(),
        });
        Self {
            env,
            regions,
            replicator,
            _tables: tables,
        }
    }

    /// The first region.
    pub fn a(&self) -> &RegionEnv {
        &self.regions[0]
    }

    /// The second region.
    pub fn b(&self) -> &RegionEnv {
        &self.regions[1]
    }

    /// A workspace binary pointed at this environment as a process in `region` runs.
    pub fn relay_command(&self, bin: &str, region: &RegionEnv) -> tokio::process::Command {
        let mut command = self.env.relay_command(bin);
        command.envs(region.env());
        command
    }

    /// Creates `table` as `spec` declares it in every region, with the stream every replica of
    /// a global table has: the replicator replicates it (the lease table, say).
    ///
    /// # Panics
    /// When a region refuses it.
    pub async fn create_table_in_every_region(&self, table: &str, spec: &TableSpec) {
        self.replicator.add_table(table);
        for region in &self.regions {
            create_global_table(region, table, spec).await;
        }
    }

    /// Creates the environment's dead-letter queue, under its name, in every other region too:
    /// each region's relays probe and use a queue of their own region (as a stack per region
    /// deploys one), and moto keeps each region's queues apart under one URL.
    ///
    /// # Panics
    /// When moto refuses it.
    pub async fn dead_letter_queue_in_every_region(&self) {
        let name = self
            .env
            .dead_letter_queue_url
            .rsplit('/')
            .next()
            .expect("a queue URL ends with its name")
            .to_owned();
        for region in self.regions.iter().skip(1) {
            aws_sdk_sqs::Client::new(&region.sdk_config)
                .create_queue()
                .queue_name(&name)
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!("create the dead-letter queue in {}: {e:?}", region.region)
                });
        }
    }

    /// Creates the template's lease table under `table` in every region (as a global table).
    ///
    /// # Panics
    /// When a region refuses it.
    pub async fn create_lease_table(&self, table: &str) {
        let spec = Template::embedded()
            .and_then(|t| t.lease_table())
            .unwrap_or_else(|e| panic!("the template's lease table: {e}"));
        self.create_table_in_every_region(table, &spec).await;
    }
}

/// The tables of one [`GlobalTestEnv`] in every region, deleted when it is dropped: the replicator
/// reads every table the regions hold, so tables left behind by the suite's tests would cost it a
/// read each (and the machine its CPU) for the rest of the run.
#[derive(Debug)]
struct RegionTables {
    names: Arc<Mutex<Vec<String>>>,
    clients: Vec<aws_sdk_dynamodb::Client>,
}

impl Drop for RegionTables {
    fn drop(&mut self) {
        // Only on a multi-threaded runtime can a drop wait for the calls; elsewhere the tables stay.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let names = self.names.lock().map(|n| n.clone()).unwrap_or_default();
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                for client in &self.clients {
                    for table in &names {
                        // Best effort: a table a test deleted itself is already gone.
                        let _ = client.delete_table().table_name(table).send().await;
                    }
                }
            });
        });
    }
}

/// Creates `table` from `spec` in `region`, with a `NEW_AND_OLD_IMAGES` stream when `spec` has
/// none (making a table global turns its stream on); its stream's ARN.
async fn create_global_table(region: &RegionEnv, table: &str, spec: &TableSpec) -> String {
    let mut spec = spec.clone();
    spec.stream_specification.get_or_insert(StreamSpec {
        stream_view_type: "NEW_AND_OLD_IMAGES".to_owned(),
    });
    create_table_from(&region.dynamodb, table, &spec)
        .await
        .unwrap_or_else(|e| panic!("{table} in {}: {e}", region.region))
        .stream_arn
}

/// The replicator's control (its HTTP interface, `OUTBOX_EMULATOR_REPLICATOR`) over one
/// environment's tables: the replicator is shared by every test of the run, so what a test cuts,
/// lags or waits for is the links of its own tables only, never another test's.
#[derive(Debug, Clone)]
pub struct Replicator {
    endpoint: String,
    tables: Arc<Mutex<Vec<String>>>,
}

impl Replicator {
    /// The control over `tables` (more are added by [`GlobalTestEnv::create_table_in_every_region`]).
    ///
    /// # Panics
    /// With instructions when the emulator runs no replicator.
    pub fn from_env(tables: Vec<String>) -> Self {
        let endpoint = std::env::var(REPLICATOR_VARIABLE)
            .unwrap_or_else(|_| panic!("{REPLICATOR_VARIABLE} is not set: {HOW_TO_RUN}"));
        Self {
            endpoint,
            tables: Arc::new(Mutex::new(tables)),
        }
    }

    fn tables(&self) -> Vec<String> {
        self.tables.lock().expect("tables lock").clone()
    }

    fn add_table(&self, table: &str) {
        self.tables
            .lock()
            .expect("tables lock")
            .push(table.to_owned());
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        let (status, reply) = local_http::request(&self.endpoint, "POST", path, Some(body)).await;
        assert_eq!(
            status, 200,
            "the replicator refused POST {path} {body}: {reply}"
        );
        reply
    }

    fn links(&self, from: &Region, to: &Region) -> Value {
        json!({"from": from.as_str(), "to": to.as_str(), "tables": self.tables()})
    }

    /// Holds back every write of this environment's tables from `from` to `to`, until
    /// [`restore`](Self::restore).
    pub async fn cut(&self, from: &Region, to: &Region) {
        self.post("/cut", &self.links(from, to)).await;
    }

    /// Replicates from `from` to `to` again, what was held first, in order.
    pub async fn restore(&self, from: &Region, to: &Region) {
        self.post("/restore", &self.links(from, to)).await;
    }

    /// Cuts `region` off: no write leaves it, none reaches it.
    pub async fn isolate(&self, region: &Region, regions: &[RegionEnv]) {
        for other in regions.iter().filter(|r| r.region != *region) {
            self.cut(region, &other.region).await;
            self.cut(&other.region, region).await;
        }
    }

    /// Ends [`isolate`](Self::isolate): both ways replicate again.
    pub async fn reconnect(&self, region: &Region, regions: &[RegionEnv]) {
        for other in regions.iter().filter(|r| r.region != *region) {
            self.restore(region, &other.region).await;
            self.restore(&other.region, region).await;
        }
    }

    /// Applies each write from `from` to `to` no sooner than `lag` after it was read.
    pub async fn set_lag(&self, from: &Region, to: &Region, lag: Duration) {
        let mut body = self.links(from, to);
        body["lag_ms"] = json!(u64::try_from(lag.as_millis()).unwrap_or(u64::MAX));
        self.post("/lag", &body).await;
    }

    /// Applies the oldest `count` writes to `table` held from `from` to `to`; the link stays cut.
    pub async fn release(&self, from: &Region, to: &Region, table: &str, count: u32) {
        self.post(
            "/release",
            &json!({"from": from.as_str(), "to": to.as_str(), "table": table, "count": count}),
        )
        .await;
    }

    /// Returns once every write made to this environment's tables before the call is replicated
    /// by every link that is not cut (those cut hold theirs).
    ///
    /// # Panics
    /// When it has not caught up within a minute (with the replicator's statistics).
    pub async fn wait_caught_up(&self) {
        let timeout_ms = u64::try_from(CATCH_UP_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        let (status, reply) = local_http::request(
            &self.endpoint,
            "POST",
            "/wait-caught-up",
            Some(&json!({"timeout_ms": timeout_ms, "tables": self.tables()})),
        )
        .await;
        assert_eq!(
            status, 200,
            "the replicator did not catch up within {CATCH_UP_TIMEOUT:?}: {reply}"
        );
    }

    /// The counts of the links from `from` to `to` of this environment's tables, summed.
    ///
    /// # Panics
    /// When the replicator has no such direction.
    pub async fn link_stats(&self, from: &Region, to: &Region) -> LinkStats {
        let (status, reply) = local_http::request(&self.endpoint, "GET", "/stats", None).await;
        assert_eq!(status, 200, "the replicator's statistics: {reply}");
        let direction = &reply["directions"][format!("{from}>{to}")];
        assert!(
            direction.is_object(),
            "the replicator has no direction {from}>{to}: {reply}"
        );
        self.tables()
            .iter()
            .filter_map(|t| direction["tables"].get(t))
            .map(|t| serde_json::from_value::<LinkStats>(t.clone()).expect("a link's counts"))
            .fold(LinkStats::default(), LinkStats::add)
    }
}

/// What the replicator did on links of one direction, as `GET /stats` reports each table's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct LinkStats {
    /// Writes read and not applied yet.
    pub queued: u64,
    /// Writes held while the link is cut.
    pub held_back: u64,
    pub applied: u64,
    /// Writes older than the version their destination held, not applied (last writer wins).
    pub dropped_as_older: u64,
    /// Writes whose destination table was gone.
    pub failed: u64,
}

impl LinkStats {
    fn add(self, other: Self) -> Self {
        Self {
            queued: self.queued + other.queued,
            held_back: self.held_back + other.held_back,
            applied: self.applied + other.applied,
            dropped_as_older: self.dropped_as_older + other.dropped_as_older,
            failed: self.failed + other.failed,
        }
    }
}
