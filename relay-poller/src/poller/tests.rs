use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use outbox_shared::schema::{self, attr};
use outbox_shared::{NewOutboxEvent, OutboxConfig, OutboxItem, ShardCount};
use relay_runtime::AggregateHolds;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::assignment::{PageStart, PassShards, StaticShards};
use crate::index::RawItem;

mod table;

use table::{Table, key_of};

/// Well in the past, so drains (which cut off at the real now) take these events.
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 10, 0, 0).unwrap()
}

/// A pending event of `aggregate` with `sequence`, created `offset_ms` after t0.
fn event(aggregate: &str, sequence: u64, offset_ms: i64) -> RawItem {
    let new = NewOutboxEvent {
        partition_key: schema::user_pk("u1"),
        event_type: "OrderStatusChanged".into(),
        aggregate_type: "Order".into(),
        aggregate_id: aggregate.into(),
        sequence: Some(sequence),
        payload: serde_json::json!({"n": sequence}),
        trace_header: None,
        trace_context: None,
    };
    let at = t0() + chrono::Duration::milliseconds(offset_ms);
    let id = format!("{aggregate}-{sequence}");
    OutboxItem::pending_with_id(new, &OutboxConfig::new("t"), at, id)
        .unwrap()
        .to_item()
        .unwrap()
}

/// Every shard of the pollers' 16, each page allowed.
fn all() -> StaticShards {
    StaticShards(
        (0..16)
            .map(outbox_shared::schema::PendingPartition::from)
            .collect(),
    )
}

fn poller(
    table: &Table,
    page_size: i32,
) -> Poller<Ports<&Table, &Table, &Table, &Table, &Table, &Table>> {
    let settings = PollerSettings {
        partitions: crate::partitions::Partitions::single_region(ShardCount::new(16).unwrap()),
        page_size,
        shard_concurrency: 4,
        mark_concurrency: 3,
        idle_backoff_max: Duration::from_secs(1),
        ttl_refresh_margin: DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: DEFAULT_SWEEP_INTERVAL,
        index_lag: DEFAULT_INDEX_LAG,
    };
    Poller::new(Ports::all(table), settings)
}

fn later() -> DateTime<Utc> {
    t0() + chrono::Duration::hours(1)
}

#[tokio::test]
async fn steps_until_empty_publishing_each_aggregate_in_order() {
    // Given 3 aggregates with 25 events each, interleaved in time
    let table = Table::default();
    for seq in 1..=25 {
        for (i, agg) in ["a", "b", "c"].iter().enumerate() {
            table.insert(event(agg, seq, i64::try_from(seq * 3).unwrap() + i as i64));
        }
    }
    let poller = poller(&table, 7);
    let cancel = CancellationToken::new();

    // When the loop is driven pass by pass until it reports empty
    let first = poller.pass(&all(), later(), &cancel).await;
    let second = poller.pass(&all(), later(), &cancel).await;

    // Then the first pass took everything and the second found nothing
    assert_eq!(first.outcome(), PassOutcome::Progress);
    assert_eq!((first.taken, first.published), (75, 75));
    assert_eq!(second.outcome(), PassOutcome::Empty);
    assert_eq!(table.pending(), 0);
    let published = table.published.lock().unwrap().clone();
    assert_eq!(published.len(), 75);
    for agg in ["a", "b", "c"] {
        let ids: Vec<_> = published
            .iter()
            .filter(|e| e.ordering_key == agg)
            .map(|e| e.event_id.clone())
            .collect();
        let want: Vec<_> = (1..=25).map(|s| format!("{agg}-{s}")).collect();
        assert_eq!(ids, want);
    }
    let key = key_of(&event("a", 1, 0));
    assert_eq!(table.status(&key), "PUBLISHED");
}

#[tokio::test]
async fn leaves_events_younger_than_the_cutoff_alone() {
    // Given an old and a young event
    let table = Table::default();
    table.insert(event("old", 1, 0));
    table.insert(event("young", 1, 10_000));

    // When a pass runs with a cutoff between them
    let stats = poller(&table, 100)
        .pass(
            &all(),
            t0() + chrono::Duration::seconds(5),
            &CancellationToken::new(),
        )
        .await;

    // Then only the old one is published
    assert_eq!(stats.published, 1);
    assert_eq!(table.status(&key_of(&event("old", 1, 0))), "PUBLISHED");
    assert_eq!(table.status(&key_of(&event("young", 1, 0))), "PENDING");
    assert_eq!(table.pending(), 1);
}

#[tokio::test]
async fn poison_items_are_dead_lettered_and_do_not_stop_the_step() {
    // Given an undecodable item, one EventBridge rejects, and a good one
    let table = Table::default();
    let mut undecodable = event("p", 1, 0);
    undecodable.remove(attr::EVENT_TYPE);
    table.insert(undecodable.clone());
    table.insert(event("r", 1, 1));
    table.rejected.lock().unwrap().insert("r-1".into());
    table.insert(event("g", 1, 2));
    let poller = poller(&table, 100);

    // When the loop runs until empty
    let stats = poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;
    let next = poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then both poison items are dead-lettered with reason and record, and marked
    assert_eq!((stats.published, stats.dead_lettered), (1, 2));
    assert_eq!(next.outcome(), PassOutcome::Empty);
    let letters = table.dead_letters.lock().unwrap().clone();
    assert_eq!(letters.len(), 2);
    let undecodable_letter = letters
        .iter()
        .find(|l| l.event_id.as_deref() == Some("p-1"))
        .unwrap();
    assert!(
        undecodable_letter.reason.contains("undecodable"),
        "{}",
        undecodable_letter.reason
    );
    assert_eq!(undecodable_letter.record["EventId"], "p-1");
    assert_eq!(undecodable_letter.origin, ORIGIN);
    let rejected = letters
        .iter()
        .find(|l| l.event_id.as_deref() == Some("r-1"))
        .unwrap();
    assert!(rejected.reason.contains("MalformedDetail"));
    assert_eq!(table.status(&key_of(&undecodable)), "DEAD_LETTERED");
    assert_eq!(table.status(&key_of(&event("g", 1, 0))), "PUBLISHED");
}

#[tokio::test]
async fn a_failed_event_holds_back_the_rest_of_its_aggregate() {
    // Given aggregate x whose first event fails, over several pages, and a healthy aggregate y
    let table = Table::default();
    for seq in 1..=5 {
        table.insert(event("x", seq, i64::try_from(seq).unwrap()));
        table.insert(event("y", seq, i64::try_from(seq).unwrap()));
    }
    table.failing_aggregates.lock().unwrap().insert("x".into());
    let poller = poller(&table, 2);

    // When a drain runs while x keeps failing
    let summary = poller
        .drain(&all(), Duration::ZERO, 2, &CancellationToken::new())
        .await;

    // Then y is published, x stays pending, and the drain reports it incomplete
    assert!(!summary.complete);
    assert_eq!(summary.remaining, Some(5));
    assert_eq!(summary.published, 5);
    assert!(summary.failed >= 1, "{summary:?}");
    assert_eq!(table.pending(), 5);
    assert!(
        table
            .published
            .lock()
            .unwrap()
            .iter()
            .all(|e| e.ordering_key == "y")
    );

    // And once x recovers, a drain completes with x in order
    table.failing_aggregates.lock().unwrap().clear();
    let summary = poller
        .drain(&all(), Duration::ZERO, 2, &CancellationToken::new())
        .await;
    assert!(summary.complete);
    assert_eq!(summary.failed, 0);
    let x: Vec<_> = table
        .published
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.ordering_key == "x")
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(x, ["x-1", "x-2", "x-3", "x-4", "x-5"]);
}

#[tokio::test]
async fn an_event_not_sent_holds_back_its_aggregates_later_event_on_a_later_page() {
    // Given aggregate x's two events on two pages of one shard, the first not sent (the stalled
    // publish limit, or the lease's poll deadline, came first)
    let table = Table::default();
    table.insert(event("x", 1, 1));
    table.insert(event("x", 2, 2));
    table.not_sent.lock().unwrap().insert("x-1".into());
    let poller = poller(&table, 1);

    // When a pass runs
    let stats = poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then x-2 is not published before x-1: it is held back for the rest of the pass, and both
    // stay pending, neither counted as failed
    assert!(
        table.published.lock().unwrap().is_empty(),
        "x-2 overtook x-1"
    );
    assert_eq!(table.pending(), 2);
    assert_eq!((stats.held_back, stats.failed), (1, 0), "{stats:?}");

    // And once x-1 is sent, the next pass publishes both in order
    table.not_sent.lock().unwrap().clear();
    poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;
    assert_eq!(table.published_ids(), ["x-1", "x-2"]);
}

/// Every shard of [`all`], each page allowed but in `partition`, whose pages may start until
/// `pages` have: then its pass stops, as it does when its lease is lost mid-pass.
struct PagesThenStop {
    partition: String,
    pages: std::sync::atomic::AtomicUsize,
}

impl ShardAssignment for PagesThenStop {
    async fn for_pass(&self) -> PassShards {
        all().for_pass().await
    }

    fn begin_page(&self, partition: &schema::PendingPartition) -> PageStart {
        if partition.gsi1pk() != self.partition {
            return all().begin_page(partition);
        }
        let left = self.pages.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |left| left.checked_sub(1),
        );
        match left {
            Ok(_) => PageStart::Go {
                deadline: relay_runtime::Deadline::NONE,
            },
            Err(_) => PageStart::Stop,
        }
    }

    fn end_page(&self, _: &schema::PendingPartition) {}

    fn partition_polled(&self, _: &schema::PendingPartition) {}
}

#[tokio::test]
async fn a_page_read_ahead_is_not_relayed_once_the_pass_may_not_go_on() {
    // Given aggregate x's six events on three pages of one shard, and a lease that lets one page
    // start (the second page is read while the first is relayed)
    let table = Table::default();
    for seq in 1..=6 {
        table.insert(event("x", seq, i64::try_from(seq).unwrap()));
    }
    let poller = poller(&table, 2);
    let partition = decode::string_attr(&event("x", 1, 1), attr::GSI1PK).unwrap();
    let one_page = PagesThenStop {
        partition: partition.clone(),
        pages: std::sync::atomic::AtomicUsize::new(1),
    };

    // When a pass runs
    let stats = poller
        .pass(&one_page, later(), &CancellationToken::new())
        .await;

    // Then the second page was read while the first was relayed, and only the first is relayed:
    // the page read ahead is dropped, its events pending
    assert_eq!(table.pages_read.lock().unwrap()[&partition], 2);
    assert_eq!((stats.taken, stats.published), (2, 2), "{stats:?}");
    assert_eq!(table.pending(), 4);

    // And the next pass, every page allowed, publishes the rest in order
    poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;
    assert_eq!(
        table.published_ids(),
        ["x-1", "x-2", "x-3", "x-4", "x-5", "x-6"]
    );
}

#[tokio::test]
async fn a_lost_mark_race_is_counted_not_an_error() {
    // Given an event another relay marks while this one publishes it
    let table = Table::default();
    let raw = event("a", 1, 0);
    table.insert(raw.clone());
    table.stolen.lock().unwrap().insert(key_of(&raw));

    // When the poller drains
    let summary = poller(&table, 10)
        .drain(&all(), Duration::ZERO, 3, &CancellationToken::new())
        .await;

    // Then it is counted as already published and the drain completes
    assert_eq!((summary.published, summary.already_marked), (0, 1));
    assert!(summary.complete);
    assert_eq!(summary.failed, 0);
}

#[tokio::test]
async fn a_drain_whose_marks_all_fail_is_incomplete_and_counts_them_not_marked() {
    // Given 3 pending events and a status store that cannot mark
    let table = Table::default();
    for (i, agg) in ["a", "b", "c"].iter().enumerate() {
        table.insert(event(agg, 1, i64::try_from(i).unwrap()));
    }
    table
        .marks_fail
        .store(true, std::sync::atomic::Ordering::Relaxed);

    // When a drain runs until it gives up after 2 stalled passes
    let summary = poller(&table, 10)
        .drain(&all(), Duration::ZERO, 2, &CancellationToken::new())
        .await;

    // Then it is incomplete (the binary exits non-zero), nothing counts as published, and each
    // pass's 3 publishes count as not marked; the events are still pending
    assert!(!summary.complete, "{summary:?}");
    assert_eq!(summary.passes, 2);
    assert_eq!((summary.published, summary.not_marked), (0, 6));
    assert_eq!(summary.remaining, Some(3));
    assert_eq!(table.published.lock().unwrap().len(), 6);
}

#[tokio::test]
async fn a_cancelled_poller_takes_no_work() {
    // Given pending events and a cancelled token
    let table = Table::default();
    table.insert(event("a", 1, 0));
    let cancel = CancellationToken::new();
    cancel.cancel();

    // When it passes, runs and drains
    let stats = poller(&table, 10).pass(&all(), later(), &cancel).await;
    poller(&table, 10)
        .run(&all(), Duration::ZERO, cancel.clone())
        .await;
    let summary = poller(&table, 10)
        .drain(&all(), Duration::ZERO, 3, &cancel)
        .await;

    // Then nothing was taken and the event stays pending
    assert!(stats.interrupted);
    assert_eq!(stats.taken, 0);
    assert!(summary.interrupted && !summary.complete);
    assert_eq!(table.pending(), 1);
}

/// `raw` moved to `partition`, as a writer on another shard count would have put it.
fn under(mut raw: RawItem, partition: &str) -> RawItem {
    raw.insert(
        attr::GSI1PK.to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S(partition.to_owned()),
    );
    raw
}

#[tokio::test]
async fn the_sweep_publishes_partitions_outside_the_shard_count_in_aggregate_order() {
    // Given aggregate m resharded from 32 to 16 shards: events 1-3 under shard 20 of 32, 4-5
    // under its own shard of 16; and aggregate n entirely under shard 31 of 32
    let table = Table::default();
    let stray = schema::pending_shard_pk(20);
    for seq in 1..=3 {
        table.insert(under(event("m", seq, i64::try_from(seq).unwrap()), &stray));
    }
    for seq in 4..=5 {
        table.insert(event("m", seq, i64::try_from(seq).unwrap()));
    }
    table.insert(under(event("n", 1, 0), &schema::pending_shard_pk(31)));
    let poller = poller(&table, 2);

    // When a drain runs with the poller on 16 shards
    let summary = poller
        .drain(&all(), Duration::ZERO, 2, &CancellationToken::new())
        .await;

    // Then everything is published, m in sequence order, and the index is empty
    assert!(summary.complete, "{summary:?}");
    assert_eq!((summary.published, summary.remaining), (6, Some(0)));
    assert_eq!(table.pending(), 0);
    let m: Vec<_> = table
        .published
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.ordering_key == "m")
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(m, ["m-1", "m-2", "m-3", "m-4", "m-5"]);
}

#[tokio::test]
async fn a_stray_aggregate_that_fails_holds_back_its_events_in_the_shards() {
    // Given aggregate m with event 1 under a stray partition, failing, and event 2 in a shard
    let table = Table::default();
    table.insert(under(event("m", 1, 1), &schema::pending_shard_pk(20)));
    table.insert(event("m", 2, 2));
    table.failing_aggregates.lock().unwrap().insert("m".into());

    // When a pass runs
    let stats = poller(&table, 10)
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then event 2 did not overtake event 1
    assert_eq!(stats.stray_pending, Some(1));
    assert_eq!((stats.failed, stats.held_back), (1, 1));
    assert!(table.published.lock().unwrap().is_empty());
    assert_eq!(table.pending(), 2);
}

#[tokio::test]
async fn run_sweeps_once_per_interval_and_every_drain_pass_sweeps() {
    // Given a stray event and a poller whose sweep interval is long
    let table = Table::default();
    let poller = poller(&table, 10);
    let cancel = CancellationToken::new();

    // When passes run back to back
    let first = poller.pass(&all(), later(), &cancel).await;
    table.insert(under(event("n", 1, 0), &schema::pending_shard_pk(31)));
    let second = poller.pass(&all(), later(), &cancel).await;

    // Then only the first swept, and the stray event waits for the next sweep...
    assert_eq!(first.stray_pending, Some(0));
    assert_eq!(second.stray_pending, None);
    assert_eq!(table.pending(), 1);
    // ...which a drain always does
    let summary = poller.drain(&all(), Duration::ZERO, 2, &cancel).await;
    assert!(summary.complete);
    assert_eq!(table.pending(), 0);
}

#[tokio::test]
async fn pending_items_near_their_ttl_get_it_extended_before_anything_else() {
    // Given an event whose ttl is past (written in January with 7 days), one whose ttl is
    // far away, and a failing aggregate whose event stays pending
    let table = Table::default();
    let expired = event("a", 1, 0);
    let mut fresh = event("b", 1, 1);
    let far = Utc::now().timestamp() + 30 * 24 * 3600;
    fresh.insert(
        attr::TTL.to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::N(far.to_string()),
    );
    let held = event("c", 1, 2);
    for raw in [&expired, &fresh, &held] {
        table.insert(raw.clone());
    }
    table.failing_aggregates.lock().unwrap().insert("c".into());

    // When a pass runs
    let stats = poller(&table, 10)
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then the two items with a past ttl were extended (the one left pending included), the
    // fresh one was not
    assert_eq!(stats.ttl_extended, 2);
    let extended = table.extended.lock().unwrap().clone();
    assert!(extended.contains(&key_of(&expired)));
    assert!(extended.contains(&key_of(&held)));
    assert!(!extended.contains(&key_of(&fresh)));
    assert_eq!(table.status(&key_of(&held)), "PENDING");
}

#[tokio::test]
async fn poison_reasons_name_attributes_and_never_quote_values() {
    // Given pending items whose attributes hold personal data in the wrong type or entity
    let table = Table::default();
    let secret = "jane.doe@example.com";
    let mut wrong_type = event("p", 1, 0);
    wrong_type.insert(
        attr::SEQUENCE.to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S(secret.to_owned()),
    );
    table.insert(wrong_type);
    let mut not_outbox = event("q", 1, 1);
    not_outbox.insert(
        attr::ENTITY_TYPE.to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S(secret.to_owned()),
    );
    table.insert(not_outbox);

    // When they are drained
    let summary = poller(&table, 10)
        .drain(&all(), Duration::ZERO, 2, &CancellationToken::new())
        .await;

    // Then both are dead-lettered with reasons that name the attribute but not the value
    assert_eq!(summary.dead_lettered, 2);
    let letters = table.dead_letters.lock().unwrap().clone();
    for letter in &letters {
        assert!(!letter.reason.contains(secret), "{}", letter.reason);
    }
    let reasons: Vec<&str> = letters.iter().map(|l| l.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.contains(attr::SEQUENCE)),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains(attr::ENTITY_TYPE)),
        "{reasons:?}"
    );
}

#[test]
fn outcome_reflects_progress() {
    let empty = PassStats::default();
    assert_eq!(empty.outcome(), PassOutcome::Empty);
    let stalled = PassStats {
        taken: 3,
        failed: 3,
        ..PassStats::default()
    };
    assert_eq!(stalled.outcome(), PassOutcome::Stalled);
    let errored = PassStats {
        read_errors: 1,
        ..PassStats::default()
    };
    assert_eq!(errored.outcome(), PassOutcome::Stalled);
    let progress = PassStats {
        taken: 3,
        published: 1,
        already_marked: 1,
        ..PassStats::default()
    };
    assert_eq!(progress.outcome(), PassOutcome::Progress);
    // Items found already marked are gone from the table, not progress: the pass saw nothing
    // pending
    let already_marked = PassStats {
        taken: 2,
        already_marked: 2,
        ..PassStats::default()
    };
    assert_eq!(already_marked.outcome(), PassOutcome::Empty);
    let some_failed = PassStats {
        taken: 3,
        already_marked: 2,
        failed: 1,
        ..PassStats::default()
    };
    assert_eq!(some_failed.outcome(), PassOutcome::Stalled);
}

#[tokio::test(start_paused = true)]
async fn a_pass_right_after_one_that_marked_items_skips_those_the_lagging_index_still_returns() {
    // Given 3 pending events and an index that keeps returning a marked item for a while
    let table = Table::default();
    table
        .lag_index
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for (i, agg) in ["a", "b", "c"].iter().enumerate() {
        table.insert(event(agg, 1, i64::try_from(i).unwrap()));
    }
    let poller = poller(&table, 10);
    let cancel = CancellationToken::new();

    // When a pass publishes them, and the next starts at once, while the index still returns
    // them
    let first = poller.pass(&all(), later(), &cancel).await;
    let second = poller.pass(&all(), later(), &cancel).await;

    // Then the second publishes nothing again: it skips the 3 and finds the index empty
    assert_eq!(
        (first.published, first.outcome()),
        (3, PassOutcome::Progress)
    );
    assert_eq!(table.published.lock().unwrap().len(), 3);
    assert_eq!(
        (second.taken, second.recently_marked, second.already_marked),
        (0, 3, 0)
    );
    assert_eq!(second.outcome(), PassOutcome::Empty);
    assert_eq!(table.pending(), 0);

    // And once the index has caught up and the lag is over, nothing is remembered or skipped
    table.catch_up_index();
    tokio::time::sleep(DEFAULT_INDEX_LAG).await;
    assert!(poller.pages.recently_marked.is_empty());
    let third = poller.pass(&all(), later(), &cancel).await;
    assert_eq!((third.taken, third.recently_marked), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn items_found_already_marked_are_not_published_again_by_the_next_pass() {
    // Given 2 events another relay marks while this poller publishes them, in an index that
    // keeps returning marked items
    let table = Table::default();
    table
        .lag_index
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for (i, agg) in ["a", "b"].iter().enumerate() {
        let raw = event(agg, 1, i64::try_from(i).unwrap());
        table.insert(raw.clone());
        table.stolen.lock().unwrap().insert(key_of(&raw));
    }
    let poller = poller(&table, 10);
    let cancel = CancellationToken::new();

    // When two passes run back to back
    let first = poller.pass(&all(), later(), &cancel).await;
    let second = poller.pass(&all(), later(), &cancel).await;

    // Then the first found them already marked (no progress: the loops pause), and the second
    // skipped them instead of publishing them again
    assert_eq!(
        (first.already_marked, first.outcome()),
        (2, PassOutcome::Empty)
    );
    assert_eq!((second.recently_marked, second.taken), (2, 0));
    assert_eq!(table.published.lock().unwrap().len(), 2);
}

#[test]
fn cutoff_never_underflows() {
    assert_eq!(
        cutoff(t0(), Duration::from_secs(30)),
        t0() - chrono::Duration::seconds(30)
    );
    assert_eq!(cutoff(t0(), Duration::MAX), DateTime::<Utc>::MIN_UTC);
}

#[tokio::test]
async fn the_ttl_refresh_metric_counts_each_extension_once() {
    // Given 3 pending events of one aggregate whose ttl is past, read a page of 1 at a time
    let table = Table::default();
    for seq in 1..=3 {
        table.insert(event("a", seq, i64::try_from(seq).unwrap()));
    }
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = ::metrics::set_default_local_recorder(&recorder);

    // When a pass refreshes them, page by page
    let stats = poller(&table, 1)
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then the pass and the metric both count 3 extensions
    assert_eq!(stats.ttl_extended, 3);
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == relay_runtime::metrics::TTL_EXTENDED)
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            other => panic!("TtlExtended is {other:?}"),
        })
        .sum();
    assert_eq!(counted, 3);
}

/// `raw` as the stream relay leaves it under its aggregate's hold.
fn left(raw: &RawItem) -> relay_runtime::LeftEvent {
    relay_runtime::LeftEvent {
        key: key_of(raw),
        partition: raw[attr::GSI1PK].as_s().unwrap().clone(),
        sort_key: raw[attr::GSI1SK].as_s().unwrap().clone(),
    }
}

#[tokio::test]
async fn a_hold_kept_while_its_events_are_pending_gets_its_ttl_pushed_out_and_is_released_once_they_are_out()
 {
    // Given aggregate a held with its event left to the poller and still pending, and the hold's
    // ttl an hour away (the poller has kept failing to publish it)
    let table = Table::default();
    let raw = event("a", 1, 0);
    table.insert(raw.clone());
    let holds = &table.holds;
    holds.hold("a", &[left(&raw)]).await.unwrap();
    let soon = Utc::now().timestamp() + 3600;
    holds.set_ttl("a", soon);
    table.failing_aggregates.lock().unwrap().insert("a".into());
    let poller = poller(&table, 10);

    // When a pass fails to publish the event
    poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then the hold stays, its ttl pushed out past the refresh margin, so DynamoDB's TTL does not
    // delete it while its event is unpublished
    assert!(holds.holds().contains_key("a"));
    let ttl = holds.ttl("a").unwrap();
    assert!(ttl > soon + 24 * 3600, "ttl {ttl}, was {soon}");

    // And once the event is published, the pass that published it deletes the hold
    table.failing_aggregates.lock().unwrap().clear();
    let stats = poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;
    assert_eq!(table.status(&key_of(&raw)), "PUBLISHED");
    assert!(holds.holds().is_empty());
    assert_eq!(stats.holds_released, 1);
}

#[tokio::test]
async fn holds_are_released_in_step_with_the_pages_that_publish_their_events() {
    // Given 30 aggregates of one shard held, each with two events left to the poller, over 6
    // pages of 10
    let table = Table::default();
    let aggregates: Vec<String> = (0..30).map(|i| format!("h{i:02}")).collect();
    let partition = schema::pending_shard_pk(outbox_shared::shard_for(
        "h00",
        ShardCount::new(16).unwrap(),
    ));
    let mut events = Vec::new();
    for (i, aggregate) in aggregates.iter().enumerate() {
        let mut first = event(aggregate, 1, i64::try_from(i).unwrap());
        let mut second = event(aggregate, 2, 1000 + i64::try_from(i).unwrap());
        for raw in [&mut first, &mut second] {
            // One shard for all, as in a hot partition after an outage
            raw.insert(
                attr::GSI1PK.into(),
                aws_sdk_dynamodb::types::AttributeValue::S(partition.clone()),
            );
            table.insert(raw.clone());
        }
        table.holds.hold(aggregate, &[left(&first)]).await.unwrap();
        table
            .holds
            .leave(aggregate, &[left(&second)])
            .await
            .unwrap();
        events.push((first, second));
    }
    let poller = poller(&table, 10);

    // When one pass publishes them
    let stats = poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then every event is published, in order, and every hold released in the same pass
    assert_eq!(stats.published, 60);
    assert!(table.holds.holds().is_empty(), "{:?}", table.holds.holds());
    assert_eq!(stats.holds_released, 30);

    // And no hold cost a read of its events: the pass had just marked each last event, and the
    // holds were read a page of 10 at a time, each once
    assert_eq!(stats.hold_reads, 0);
    assert!(table.hold_reads.lock().unwrap().is_empty());
    assert_eq!(table.hold_pages.lock().unwrap()[&partition], 3);
}

#[tokio::test]
async fn a_hold_stays_while_an_earlier_event_of_its_aggregate_is_held_back() {
    // Given aggregate x held with x-2 left under it, and x-1 (earlier, same shard) failing
    let table = Table::default();
    let (first, second) = (event("x", 1, 0), event("x", 2, 1));
    table.insert(first.clone());
    table.insert(second.clone());
    table.holds.hold("x", &[left(&second)]).await.unwrap();
    table.failing_aggregates.lock().unwrap().insert("x".into());

    // When a pass runs past both
    let stats = poller(&table, 1)
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then x stays held: its events are pending, x-2 behind x-1
    assert_eq!(stats.holds_released, 0);
    assert!(table.holds.holds().contains_key("x"));
    assert_eq!(table.pending(), 2);
}

#[tokio::test]
async fn a_hold_whose_last_event_another_relay_published_is_released_after_one_read() {
    // Given aggregate y held, its last event left already published by someone else (the
    // index no longer holds it), nothing else of y pending
    let table = Table::default();
    let raw = event("y", 1, 0);
    table.holds.hold("y", &[left(&raw)]).await.unwrap();
    table
        .statuses
        .lock()
        .unwrap()
        .insert(key_of(&raw), "PUBLISHED".into());

    // When a pass polls its shard
    let stats = poller(&table, 10)
        .pass(&all(), later(), &CancellationToken::new())
        .await;

    // Then the hold is released after one read of that event from the table
    assert!(table.holds.holds().is_empty());
    assert_eq!(stats.holds_released, 1);
    assert_eq!(*table.hold_reads.lock().unwrap(), [key_of(&raw)]);
}

#[tokio::test]
async fn a_hold_whose_last_event_is_younger_than_the_cutoff_stays() {
    // Given aggregate z held with an event left under it that is younger than the pass's cutoff
    let table = Table::default();
    let raw = event("z", 1, 0);
    table.insert(raw.clone());
    table.holds.hold("z", &[left(&raw)]).await.unwrap();

    // When a pass with a cutoff before the event runs
    let stats = poller(&table, 10)
        .pass(
            &all(),
            t0() - chrono::Duration::seconds(1),
            &CancellationToken::new(),
        )
        .await;

    // Then the hold stays: the pass did not publish past its event
    assert_eq!(stats.holds_released, 0);
    assert!(table.holds.holds().contains_key("z"));
    assert!(table.hold_reads.lock().unwrap().is_empty());
}

#[tokio::test]
async fn passes_that_publish_nothing_read_no_holds_until_a_sweep_is_due() {
    // Given aggregate a held with its event pending, and the bus failing it (an outage)
    let table = Table::default();
    let raw = event("a", 1, 0);
    let partition = raw[attr::GSI1PK].as_s().unwrap().clone();
    table.insert(raw.clone());
    table.holds.hold("a", &[left(&raw)]).await.unwrap();
    table.failing_aggregates.lock().unwrap().insert("a".into());
    let poller = poller(&table, 10);
    poller
        .pass(&all(), later(), &CancellationToken::new())
        .await;
    let pages_read = || -> u64 { table.hold_pages.lock().unwrap().values().sum() };
    let read_by_the_sweeping_pass = pages_read();
    assert!(table.hold_pages.lock().unwrap()[&partition] > 0);

    // When two more passes, with no sweep due, publish nothing (the other 15 shards are idle)
    for _ in 0..2 {
        poller
            .pass(&all(), later(), &CancellationToken::new())
            .await;
    }

    // Then they read no hold, in any shard: none could have been released
    assert_eq!(pages_read(), read_by_the_sweeping_pass);
    assert!(table.holds.holds().contains_key("a"));
}
