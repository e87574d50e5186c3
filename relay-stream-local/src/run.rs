//! `relay-stream-local`'s one `run`: the clients and the relay built from its flags, the stream
//! found, then read and relayed until shutdown or idle.

use relay_runtime::SettingError;
use relay_runtime::probe::{Kind, Probe, Resource, Unusable};
use tokio_util::sync::CancellationToken;

use crate::args::{LocalArgs, RunnerOptions};
use crate::error::RunnerError;
use crate::on_failure::S3OnFailureDestination;
use crate::runner::LocalRunner;

/// The one-line JSON summary `relay-stream-local` prints on exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub published: u64,
    pub ignored: u64,
    pub dead_lettered: u64,
    pub failed: u64,
    /// Left to the poller under their aggregate's hold (hold mode): still pending, the poller
    /// publishes them in order and then releases the hold.
    pub left_to_hold: u64,
    /// Published or dead-lettered, but the status update failed: the item stays pending and the
    /// poller publishes it again (a part of `published` and `dead_lettered`).
    pub not_marked: u64,
    /// Calls sent to the target, retries included (counted by the publisher, not derived).
    #[serde(flatten)]
    pub calls: relay_runtime::publisher::PublishCalls,
    /// Records delivered again after a batch item failure (each re-delivery counts the records
    /// from the reported one to the batch's end).
    pub redelivered: u64,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (published before within its 300 s
    /// window; a part of `published`); 0 on the classic bus.
    pub deduplicated: u64,
    /// Batches given up after their retries and written to the on-failure destination.
    pub discarded_batches: u64,
    /// Payloads the claim check wrote to the payload bucket (`PAYLOAD_BUCKET`): one per event too
    /// large for the target.
    pub payloads_stored: u64,
    /// Payloads found already in the bucket (stored by an earlier publish): nothing written.
    pub payloads_already_stored: u64,
}

impl Summary {
    /// The run's outcome in words, for the last line at a terminal.
    pub fn to_words(&self) -> String {
        let mut words = format!("published {} events", self.published);
        for (count, what) in [
            (self.dead_lettered, "dead-lettered"),
            (self.failed, "failed (pending: the poller publishes them)"),
            (self.left_to_hold, "left to the poller under holds"),
            (
                self.not_marked,
                "not marked (the poller publishes them again)",
            ),
            (self.discarded_batches, "batches discarded to the bucket"),
        ] {
            if count > 0 {
                words.push_str(&format!(", {count} {what}"));
            }
        }
        words.push_str(&format!(
            " in {} calls to the target",
            self.calls.publish_calls
        ));
        words
    }

    /// Whether events left the outbox (published or dead-lettered) and not one of them was
    /// marked: the status store cannot mark (an endpoint without PartiQL, a policy without
    /// `dynamodb:PartiQLUpdate`), so everything stays pending and is published again. The runner
    /// exits non-zero on it; a few marks that failed are the poller's to finish, not an error.
    pub fn marked_none(&self) -> bool {
        let settled = self.published + self.dead_lettered;
        settled > 0 && self.not_marked >= settled
    }
}

/// Builds the clients and the relay from `args`, then reads and relays until `shutdown` or idle.
///
/// # Errors
/// [`RunnerError`] when the configuration is invalid or the stream cannot be found or listed.
pub async fn run(args: &LocalArgs, shutdown: &CancellationToken) -> Result<Summary, RunnerError> {
    let sdk_config = relay_runtime::load_aws_config().await?;
    let mut needs = relay_stream::probes(&args.relay)?;
    let bucket = args
        .discarded_batch_bucket
        .as_deref()
        .filter(|bucket| !bucket.trim().is_empty());
    needs.extend(bucket.map(|bucket| {
        Probe::Bucket(Resource::new(
            Kind::Bucket,
            bucket,
            SettingError::name_of::<LocalArgs>("discarded_batch_bucket"),
        ))
    }));
    let found = relay_runtime::probe::each(&sdk_config, &needs)
        .await
        .map_err(Box::new)?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
    let relay = relay_stream::build_relay_within(&args.relay, &sdk_config, &found)?;
    let stream_arn = match stream_arn_of(&dynamodb, &args.relay.table_name).await {
        Err(RunnerError::NoStream { .. }) => {
            return Err(Box::new(no_stream(&sdk_config, &args.relay.table_name)).into());
        }
        found => found?,
    };
    tracing::info!(stream_arn = %stream_arn, batch_size = args.batch_size, from = ?args.from, "relaying stream");
    let on_failure = bucket.map(|bucket| {
        S3OnFailureDestination::new(aws_sdk_s3::Client::new(&sdk_config), bucket, &stream_arn)
    });
    let runner = LocalRunner::new(
        relay,
        aws_sdk_dynamodbstreams::Client::new(&sdk_config),
        stream_arn,
        RunnerOptions::from(args),
    )
    .with_on_failure(on_failure);
    let counts = runner.run(shutdown).await?;
    let publish = runner.relay().publisher().stats();
    Ok(Summary {
        published: counts.published,
        ignored: counts.ignored,
        dead_lettered: counts.dead_lettered,
        failed: counts.failed,
        left_to_hold: counts.left_to_hold,
        not_marked: counts.not_marked,
        calls: publish.publish_calls.into(),
        redelivered: runner.redelivered(),
        deduplicated: publish.deduplicated,
        discarded_batches: runner.discarded_batches(),
        payloads_stored: publish.payloads_stored,
        payloads_already_stored: publish.payloads_already_stored,
    })
}

/// The table `table_name` has no stream: one line, as any resource the runner cannot use.
fn no_stream(sdk: &aws_config::SdkConfig, table_name: &str) -> Unusable {
    let setting = SettingError::name_of::<relay_stream::RelayArgs>("table_name");
    Unusable {
        resource: Resource::new(Kind::Stream, format!("of table {table_name}"), setting),
        problem: outbox_shared::Misconfiguration::Missing,
        place: relay_runtime::probe::Place::of(sdk, relay_runtime::probe::Service::DYNAMODB, None),
        operation: "DescribeTable",
        code: None,
        fix: "enable the table's stream with the view NEW_AND_OLD_IMAGES, as infra/template.yaml \
              declares it"
            .to_owned(),
        failure: None,
    }
}

/// The stream ARN of `table_name`.
///
/// # Errors
/// [`RunnerError::NoStream`] when the table cannot be described or has no stream.
pub async fn stream_arn_of(
    dynamodb: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<String, RunnerError> {
    let table = dynamodb
        .describe_table()
        .table_name(table_name)
        .send()
        .await
        .map_err(|e| RunnerError::NoStream {
            table: table_name.to_owned(),
            message: outbox_shared::error::describe(&e),
        })?;
    table
        .table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_owned)
        .ok_or_else(|| RunnerError::NoStream {
            table: table_name.to_owned(),
            message: "has no stream enabled".into(),
        })
}
