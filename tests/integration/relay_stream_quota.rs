//! The stream relay at the bus's quota, on the latency model (no emulator): one shard's records,
//! batch after batch as Lambda delivers them, against a `PutEvents` quota that throttles above
//! 500 entries/s. The relay is built once, as a Lambda container keeps it between invocations,
//! so its publish rate carries from one batch to the next. It runs on tokio's paused clock, so the
//! quota, the model's 10 ms per call and the publisher's pacing all count virtual time.

use std::time::Duration;

use chrono::Utc;
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;

const QUOTA: u32 = 500;
/// 20 s of quota: long enough for the first burst, sent before the first throttle comes back,
/// to be a small part of the whole.
const EVENTS: usize = 10_000;
/// Records per invocation: the template's `StreamBatchSize` default.
const BATCH_SIZE: usize = 100;
/// The function's timeout in the template.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_shard_at_the_bus_quota_adapts_its_rate_and_loses_nothing() {
    // Given one shard of 10,000 new outbox items, a bus that throttles above 500 entries/s, and
    // the relay with its defaults (no ceiling: it learns the quota from the throttling)
    let model = LatencyModel::new(Duration::from_millis(10));
    model.limit_put_events(QUOTA);
    let items = fixtures::pending_items("quota-table", EVENTS, Utc::now());
    let records: Vec<_> = items
        .iter()
        .enumerate()
        .map(|(i, item)| fixtures::insert_record(item, i))
        .collect();
    model.seed_pending(&items);
    let sdk = model.sdk_config();
    let relay = relay_stream::build_relay(
        // The Lambda's defaults, with a failed record re-delivered by Lambda (no aggregate
        // holds: no poller here to release them)
        &fixtures::stream_relay_args("quota-table", fixtures::publisher_args("quota-bus")),
        &sdk,
    )
    .expect("valid configuration");

    // When Lambda delivers the shard in batches of 100, each from the first record of the last
    // batch's item failure (or the next record when there was none)
    let started = tokio::time::Instant::now();
    let (mut position, mut invocations, mut redelivered) = (0, 0, 0);
    while position < records.len() {
        let batch = &records[position..(position + BATCH_SIZE).min(records.len())];
        let deadline = tokio::time::Instant::now() + INVOCATION_TIMEOUT;
        let report = relay.handle(batch, relay.deadline_of(deadline)).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "invocation timed out"
        );
        invocations += 1;
        let response = report.response(batch);
        position = match response.batch_item_failures.first() {
            None => position + batch.len(),
            Some(failure) => {
                let sequence = failure
                    .item_identifier
                    .as_deref()
                    .expect("a sequence number");
                let failed = batch
                    .iter()
                    .position(|r| r.change.sequence_number.as_deref() == Some(sequence))
                    .expect("the failure names a record of the batch");
                redelivered += batch.len() - failed;
                position + failed
            }
        };
    }
    let elapsed = started.elapsed();

    // Then every event was published and marked, and few entries were throttled
    assert_eq!(model.pending(), 0, "every event published and marked");
    let (sent, throttled) = model.put_events_entries();
    let accepted = sent - throttled;
    let events_per_second = EVENTS as f64 / elapsed.as_secs_f64();
    let ratio = throttled as f64 / sent as f64;
    eprintln!(
        "stream at a {QUOTA}/s quota: {EVENTS} events in {:.1} s of virtual time ({events_per_second:.0} events/s), {invocations} invocations, {redelivered} records re-delivered, {sent} entries sent, {throttled} throttled, {accepted} accepted",
        elapsed.as_secs_f64()
    );
    assert!(
        ratio < 0.10,
        "throttled {:.1} % of {sent} entries sent",
        ratio * 100.0
    );
    // And the shard kept close to the quota
    let quota = f64::from(QUOTA);
    assert!(
        (events_per_second - quota).abs() <= 0.2 * quota,
        "{events_per_second:.0} events/s against a quota of {QUOTA}/s"
    );
    // And an event accepted twice is one re-delivered after a batch item failure: the relay
    // never publishes an event twice within an invocation
    assert!(
        accepted - EVENTS as u64 <= redelivered as u64,
        "{accepted} accepted for {EVENTS} events with {redelivered} re-delivered"
    );
}
