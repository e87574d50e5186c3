//! The local global table the two-region demo runs on: the regions `scripts/emulator.sh` started
//! with `EMULATOR_REGIONS` (a DynamoDB Local each), and the control of the replicator between them
//! (`tools/global_table_replicator.py`, docs/testing.md "The local global table"): cutting a
//! region off, restoring it, waiting for replication to catch up. Its control is HTTP/1.0 on a
//! loopback port, one JSON request per connection.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use outbox_shared::Region;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The emulator's variables naming the regions, each region's DynamoDB and the replicator.
const REGIONS_VARIABLE: &str = "OUTBOX_EMULATOR_REGIONS";
const REPLICATOR_VARIABLE: &str = "OUTBOX_EMULATOR_REPLICATOR";

/// What to run instead when the emulator runs no global table.
const HOW_TO_RUN: &str = "run it with `make demo DEMO_ARGS=\"--regions 2\"`, which starts the \
                          local global table (EMULATOR_REGIONS=us-east-1,eu-west-1 scripts/emulator.sh)";

/// One region of the local global table and its DynamoDB (and DynamoDB Streams) endpoint.
#[derive(Debug, Clone)]
pub(crate) struct EmulatedRegion {
    pub(crate) region: Region,
    pub(crate) endpoint: String,
}

/// The first `count` regions the emulator runs, in its order.
///
/// # Errors
/// When it runs fewer (or none: started without `EMULATOR_REGIONS`), saying how to run the demo.
pub(crate) fn emulated_regions(count: usize) -> Result<Vec<EmulatedRegion>> {
    let listed = std::env::var(REGIONS_VARIABLE).unwrap_or_default();
    let regions: Vec<&str> = listed.split(',').filter(|r| !r.is_empty()).collect();
    if regions.len() < count {
        bail!(
            "{REGIONS_VARIABLE} names {} regions ({listed:?}), --regions asks for {count}: {HOW_TO_RUN}",
            regions.len()
        );
    }
    regions
        .into_iter()
        .take(count)
        .map(|name| {
            let region =
                Region::new(name).with_context(|| format!("{REGIONS_VARIABLE}: {name}"))?;
            let variable = format!(
                "OUTBOX_EMULATOR_DYNAMODB_{}",
                name.to_ascii_uppercase().replace('-', "_")
            );
            let endpoint = std::env::var(&variable)
                .with_context(|| format!("{variable} is not set: {HOW_TO_RUN}"))?;
            Ok(EmulatedRegion { region, endpoint })
        })
        .collect()
}

/// The replicator's control over the demo's tables (the replicator replicates every table of
/// every region; the demo cuts and waits for its own only).
#[derive(Debug, Clone)]
pub(crate) struct Replicator {
    endpoint: String,
    tables: Vec<String>,
}

/// How long replication may take to catch up before the demo gives up.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);

impl Replicator {
    /// The control over `tables`.
    ///
    /// # Errors
    /// When the emulator runs no replicator.
    pub(crate) fn from_env(tables: Vec<String>) -> Result<Self> {
        let endpoint = std::env::var(REPLICATOR_VARIABLE)
            .with_context(|| format!("{REPLICATOR_VARIABLE} is not set: {HOW_TO_RUN}"))?;
        Ok(Self { endpoint, tables })
    }

    /// Cuts `region` off from every other of `regions`: no write leaves it, none reaches it; what
    /// is written meanwhile is held, in order, until [`reconnect`](Self::reconnect).
    pub(crate) async fn isolate(&self, region: &Region, regions: &[Region]) -> Result<()> {
        for other in regions.iter().filter(|r| *r != region) {
            self.post("/cut", &self.link(region, other)).await?;
            self.post("/cut", &self.link(other, region)).await?;
        }
        Ok(())
    }

    /// Ends [`isolate`](Self::isolate): what was held is replicated, in order, both ways.
    pub(crate) async fn reconnect(&self, region: &Region, regions: &[Region]) -> Result<()> {
        for other in regions.iter().filter(|r| *r != region) {
            self.post("/restore", &self.link(region, other)).await?;
            self.post("/restore", &self.link(other, region)).await?;
        }
        Ok(())
    }

    /// Returns once every write made to the demo's tables before the call is replicated by every
    /// link that is not cut.
    pub(crate) async fn wait_caught_up(&self) -> Result<()> {
        let timeout_ms = u64::try_from(CATCH_UP_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        self.post(
            "/wait-caught-up",
            &json!({"timeout_ms": timeout_ms, "tables": self.tables}),
        )
        .await
        .map(|_| ())
    }

    fn link(&self, from: &Region, to: &Region) -> Value {
        json!({"from": from.as_str(), "to": to.as_str(), "tables": self.tables})
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let host = self
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let mut stream = tokio::net::TcpStream::connect(host)
            .await
            .with_context(|| format!("the replicator's control at {}", self.endpoint))?;
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        let reply = String::from_utf8_lossy(&reply);
        let (head, answer) = reply
            .split_once("\r\n\r\n")
            .with_context(|| format!("the replicator's answer to POST {path}: {reply:?}"))?;
        let status = head.split_whitespace().nth(1).unwrap_or_default();
        if status != "200" {
            bail!("the replicator refused POST {path} {body}: {status} {answer}");
        }
        Ok(serde_json::from_str(answer).unwrap_or(Value::Null))
    }
}
