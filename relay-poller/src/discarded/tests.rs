//! The recovery of discarded stream batches, on fakes of the bucket and the table, with stream
//! records recorded from DynamoDB Local (`tests/fixtures/stream`, kept true by
//! `stream_fixtures::the_stream_fixtures_are_what_the_emulator_records`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use aws_lambda_events::dynamodb::{Event, EventRecord};
use chrono::Utc;
use outbox_shared::schema::attr;
use relay_runtime::discarded_batch::{Invocation, RETRY_ATTEMPTS_EXHAUSTED, object_key};

use super::*;

const OUTBOX_BATCH: &str = include_str!("../../../tests/fixtures/stream/outbox-batch.json");
const REMOVALS: &str =
    include_str!("../../../tests/fixtures/stream/removals-of-pending-events.json");

fn records(fixture: &str) -> Vec<EventRecord> {
    serde_json::from_str::<Event>(fixture).unwrap().records
}

/// A batch of the recorded records: an order and its outbox `INSERT`, the mark's `MODIFY`, a TTL
/// deletion of a published event, another client's outbox `INSERT`; a TTL deletion of a pending
/// event and a user's delete of a pending one.
fn discarded_body() -> Vec<u8> {
    let mut all = records(OUTBOX_BATCH);
    all.extend(records(REMOVALS));
    DiscardedBatch::new(
        all,
        "shardId-00000001-0001",
        Invocation {
            request_id: "r".into(),
            function_arn: "arn:aws:lambda:eu-west-1:123456789012:function:relay".into(),
            condition: RETRY_ATTEMPTS_EXHAUSTED,
            invoke_count: 11,
            function_error: None,
        },
        Utc::now(),
    )
    .to_json()
}

/// The event id of the recorded TTL deletion of a pending event.
fn deleted_event_id() -> String {
    records(REMOVALS)
        .iter()
        .find(|r| is_ttl_deletion(r))
        .and_then(|r| match r.change.old_image.get(attr::EVENT_ID) {
            Some(serde_dynamo::AttributeValue::S(id)) => Some(id.clone()),
            _ => None,
        })
        .expect("the fixture has a TTL deletion with its event id")
}

/// The bucket: its objects by key.
#[derive(Debug, Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl Bucket {
    fn with(objects: &[(String, Vec<u8>)]) -> Self {
        Self {
            objects: Mutex::new(objects.iter().cloned().collect()),
        }
    }

    fn keys(&self) -> Vec<String> {
        self.objects.lock().unwrap().keys().cloned().collect()
    }

    fn put(&self, key: &str, body: Vec<u8>) {
        self.objects.lock().unwrap().insert(key.to_owned(), body);
    }
}

impl DiscardedBatchStore for Bucket {
    async fn list(&self) -> Result<Vec<String>, SdkFailure> {
        Ok(self.keys())
    }
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, SdkFailure> {
        Ok(self.objects.lock().unwrap().get(key).cloned())
    }
    async fn remove(&self, key: &str) -> Result<(), SdkFailure> {
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }
}

/// The table: the keys of the items there; re-creates fail while `failing`.
#[derive(Debug, Default)]
struct Table {
    items: Mutex<Vec<Attributes>>,
    failing: Mutex<bool>,
}

impl Table {
    fn key(item: &Attributes) -> (String, String) {
        (
            string(item, attr::PK).unwrap().to_owned(),
            string(item, attr::SK).unwrap().to_owned(),
        )
    }

    fn event_ids(&self) -> Vec<String> {
        self.items
            .lock()
            .unwrap()
            .iter()
            .map(|i| string(i, attr::EVENT_ID).unwrap().to_owned())
            .collect()
    }
}

impl GoneItems for Table {
    async fn recreate(&self, item: Attributes) -> Result<Recreated, SdkFailure> {
        if *self.failing.lock().unwrap() {
            return Err(SdkFailure::incomplete("PutItem", "injected"));
        }
        let mut items = self.items.lock().unwrap();
        let keys: HashSet<_> = items.iter().map(Table::key).collect();
        if keys.contains(&Table::key(&item)) {
            return Ok(Recreated::AlreadyThere);
        }
        items.push(item);
        Ok(Recreated::Recreated)
    }
}

fn key(n: u32) -> String {
    object_key(
        "esm-1",
        "shardId-00000001-0001",
        Utc::now(),
        uuid::Uuid::from_u128(u128::from(n)),
    )
}

fn recovery<'a>(bucket: &'a Bucket, table: &'a Table) -> DiscardedBatches<&'a Bucket, &'a Table> {
    DiscardedBatches::new(
        bucket,
        table,
        ShardCount::new(16).unwrap(),
        Duration::from_secs(7 * 86_400),
    )
}

#[tokio::test]
async fn a_ttl_deletion_in_a_discarded_batch_goes_back_pending_and_the_batch_is_deleted() {
    // Given a discarded batch with a TTL deletion of a pending event and two outbox INSERTs
    let bucket = Bucket::with(&[(key(1), discarded_body())]);
    let table = Table::default();

    // When the poller sweeps the bucket
    let done = recovery(&bucket, &table)
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();

    // Then the deleted event is back, pending under its shard with its own sort key and a ttl
    // ahead; the INSERTs are left to the index; the batch is gone from the bucket
    assert_eq!(table.event_ids(), [deleted_event_id()]);
    let item = table.items.lock().unwrap()[0].clone();
    assert_eq!(string(&item, attr::STATUS), Some("PENDING"));
    assert!(
        string(&item, attr::GSI1PK)
            .unwrap()
            .starts_with("OUTBOX#PENDING#")
    );
    assert!(
        string(&item, attr::GSI1SK)
            .unwrap()
            .ends_with(&deleted_event_id())
    );
    assert!(
        item[attr::TTL].as_n().unwrap().parse::<i64>().unwrap() > Utc::now().timestamp() + 86_400
    );
    assert_eq!(
        done,
        Recovery {
            batches: 1,
            recovered: 1,
            recreated: 1,
            left_to_index: 2,
            ..Recovery::default()
        }
    );
    assert!(bucket.keys().is_empty());
}

#[tokio::test]
async fn a_batch_read_twice_re_creates_nothing_twice() {
    // Given a batch that was recovered, and the same batch in the bucket again (a second poller,
    // a crash before the delete)
    let bucket = Bucket::with(&[(key(1), discarded_body())]);
    let table = Table::default();
    let poller = recovery(&bucket, &table);
    poller
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();
    bucket.put(&key(2), discarded_body());

    // When the poller sweeps again
    let again = poller
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();

    // Then it re-created nothing: the event's item is there, and the batch is deleted
    assert_eq!(table.event_ids(), [deleted_event_id()]);
    assert_eq!((again.recreated, again.already_there), (0, 1));
    assert_eq!(again.recovered, 1);
    assert!(bucket.keys().is_empty());
}

#[tokio::test]
async fn a_batch_whose_re_create_fails_stays_until_a_sweep_handles_it_whole() {
    // Given a discarded batch, and a table that refuses writes for now
    let bucket = Bucket::with(&[(key(1), discarded_body())]);
    let table = Table::default();
    *table.failing.lock().unwrap() = true;
    let poller = recovery(&bucket, &table);

    // When the poller sweeps, then sweeps again once the table takes writes
    let failed = poller
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();
    let kept = bucket.keys();
    *table.failing.lock().unwrap() = false;
    let later = poller
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();

    // Then the first sweep kept the batch (nothing is lost) and the next recovered it
    assert_eq!((failed.retry_later, failed.recovered), (1, 0));
    assert_eq!(kept, [key(1)]);
    assert_eq!((later.recreated, later.recovered), (1, 1));
    assert_eq!(table.event_ids(), [deleted_event_id()]);
    assert!(bucket.keys().is_empty());
}

#[tokio::test]
async fn an_object_that_is_not_a_discarded_batch_stays_for_a_person() {
    // Given an object that is not an invocation record beside a discarded batch
    let bucket = Bucket::with(&[
        (key(1), b"{\"hello\": 1}".to_vec()),
        (key(2), discarded_body()),
    ]);
    let table = Table::default();

    // When the poller sweeps the bucket
    let done = recovery(&bucket, &table)
        .recover(false, &CancellationToken::new())
        .await
        .unwrap();

    // Then the batch is recovered and the other object stays, counted
    assert_eq!(
        (done.batches, done.recovered, done.left_in_bucket),
        (2, 1, 1)
    );
    assert_eq!(bucket.keys(), [key(1)]);
}

#[tokio::test]
async fn a_dry_run_writes_and_deletes_nothing() {
    let bucket = Bucket::with(&[(key(1), discarded_body())]);
    let table = Table::default();

    let done = recovery(&bucket, &table)
        .recover(true, &CancellationToken::new())
        .await
        .unwrap();

    assert_eq!(
        (done.recovered, done.recreated, done.left_to_index),
        (1, 1, 2)
    );
    assert!(done.dry_run);
    assert!(table.event_ids().is_empty());
    assert_eq!(bucket.keys(), [key(1)]);
}
