//! Global tables: each region's relays publish the events written in their region, so each
//! event is published once (docs/global-tables.md).
//!
//! One DynamoDB Local table holds what a replica of a global table holds: events written in
//! us-east-1 (by the writer, configured for a global table, its client in us-east-1), events
//! written in eu-west-1 (replicated: put as another client would, stamped and indexed as the
//! writer there does; DynamoDB Local keeps one database per region, so a eu-west-1 client would
//! not see this table) and an event no writer stamped. Relays configured
//! `--regions us-east-1,eu-west-1` then publish, from this one table's stream and index, only
//! their region's events; the unstamped one is the first region's (us-east-1).

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::region::Region;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ShardCount, shard};
use outbox_tests::{TestEnv, fixtures, minimal_outbox_item};
use outbox_writer::{NewOrder, OrderLine, WriterConfig};
use relay_poller::config::{RelayArgs as PollerArgs, TableArgs};
use relay_runtime::{Deadline, RegionArgs};

const US: &str = "us-east-1";
const EU: &str = "eu-west-1";

fn regions() -> RegionArgs {
    RegionArgs::of(&[US, EU]).unwrap()
}

/// A DynamoDB client of `env` that says it is in `region` (the relays take their own region
/// from their client). DynamoDB Local keeps a database per region: only a client in the
/// environment's region (us-east-1) sees the table, so the tests run us-east-1's relays (and
/// a relay's refusal of a region not listed); eu-west-1's side is the same rule, unit-tested in
/// `relay_runtime::stream_record` and `relay_poller::partitions`.
fn client_in(env: &TestEnv, region: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        env.dynamodb
            .config()
            .to_builder()
            .region(aws_sdk_dynamodb::config::Region::new(region.to_owned()))
            .build(),
    )
}

/// The events of one table of a global table: `us` written in us-east-1 by the writer, `eu`
/// written in eu-west-1 (stamped and indexed as its writer does), and one unstamped.
struct Written {
    us: BTreeSet<String>,
    eu: BTreeSet<String>,
    unstamped: String,
}

async fn write_in_two_regions(env: &TestEnv, each: usize) -> Written {
    // The writer, configured for a global table, in us-east-1 (the environment's region)
    let writer = env.writer_with(|config: &mut WriterConfig| config.global_table = true);
    let mut us = BTreeSet::new();
    for i in 0..each {
        let order = NewOrder::new(vec![OrderLine::new("sku", 1, 100)]);
        let created = writer
            .create_order_with_outbox(&format!("us-user-{i}"), order)
            .await
            .unwrap();
        us.insert(created.event_id);
    }
    // Written in eu-west-1 and replicated here, as that region's writer stamps and indexes them
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(1));
    let mut eu = BTreeSet::new();
    for i in 0..each {
        let event_id = format!("eu-event-{i}");
        let user = format!("eu-user-{i}");
        let shard = shard::shard_for(&schema::user_pk(&user), ShardCount::default());
        let mut item = minimal_outbox_item(&user, &event_id, "OrderCreated", "{}", &created_at, 0);
        item.insert(attr::ORIGIN_REGION.into(), AttributeValue::S(EU.into()));
        item.insert(
            attr::GSI1PK.into(),
            AttributeValue::S(schema::regional_pending_shard_pk(
                &Region::new(EU).unwrap(),
                shard,
            )),
        );
        env.put_raw_item(item).await;
        eu.insert(event_id);
    }
    // And one another client wrote without a region
    let unstamped = "unstamped-event".to_owned();
    env.put_raw_item(minimal_outbox_item(
        "other-client",
        &unstamped,
        "OrderCreated",
        "{}",
        &created_at,
        3,
    ))
    .await;
    Written { us, eu, unstamped }
}

fn published(messages: &[outbox_tests::SinkMessage]) -> Vec<String> {
    messages.iter().map(|m| m.event_id().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_writer_stamps_its_region_and_indexes_the_event_under_it() {
    // Given a writer configured for a global table, in us-east-1
    let env = TestEnv::new().await;
    let written = write_in_two_regions(&env, 2).await;

    // Then its events carry OriginRegion and are pending under us-east-1's partitions
    let items = env.outbox_items().await;
    for item in items.iter().filter(|i| written.us.contains(&i.event_id)) {
        assert_eq!(item.origin_region.as_ref().map(Region::as_str), Some(US));
        let partition = schema::parse_pending_partition(item.gsi1pk.as_deref().unwrap()).unwrap();
        assert_eq!(
            partition.origin.as_ref().map(Region::as_str),
            Some(US),
            "{item:?}"
        );
    }
    assert_eq!(
        items
            .iter()
            .filter(|i| written.us.contains(&i.event_id))
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_relay_publishes_only_its_regions_events_and_the_unstamped() {
    // Given one replica's table holding events of both regions and an unstamped one
    let env = TestEnv::new().await;
    let written = write_in_two_regions(&env, 3).await;
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();

    // When the stream relay in us-east-1 handles every record of the stream
    let relay_in = |region: &str| {
        let args = relay_stream::RelayArgs {
            regions: regions(),
            ..fixtures::stream_relay_args(&env.table_name, fixtures::publisher_args(&env.bus_name))
        };
        relay_stream::build_relay_with(
            &args,
            env.publisher(args.publisher_config().unwrap()),
            client_in(&env, region),
            env.sqs.clone(),
        )
        .unwrap()
    };
    let report = relay_in(US).handle(&records, Deadline::NONE).await;

    // Then it published us-east-1's events and the unstamped one (the first region's), no other
    let mut expected: BTreeSet<String> = written.us.clone();
    expected.insert(written.unstamped.clone());
    let sink = env.wait_for_sink(4, Duration::from_secs(30)).await;
    assert_eq!(
        published(&sink).into_iter().collect::<BTreeSet<_>>(),
        expected,
        "{report:?}"
    );
    assert_eq!(report.counts().published, 4, "{report:?}");

    // And marked them, leaving eu-west-1's pending for eu-west-1's relays
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.sink_depth().await, 0);
    let pending: BTreeSet<String> = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|i| i.gsi1pk.is_some())
        .map(|i| i.event_id)
        .collect();
    assert_eq!(pending, written.eu);
}

fn poller_args(env: &TestEnv) -> PollerArgs {
    PollerArgs {
        table: TableArgs {
            table_name: env.table_name.clone(),
            index_name: schema::DEFAULT_INDEX_NAME.into(),
            shard_count: ShardCount::default(),
            shards: None,
            regions: regions(),
        },
        publisher: fixtures::publisher_args(&env.bus_name),
        retention: relay_runtime::RetentionArgs::default(),
        metrics: relay_runtime::metrics::MetricsArgs::default(),
        ttl_refresh_margin: relay_poller::DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: relay_poller::DEFAULT_SWEEP_INTERVAL,
        index_lag: relay_poller::DEFAULT_INDEX_LAG,
        dead_letter_queue_url: env.dead_letter_queue_url.clone(),
        page_size: 100,
        shard_concurrency: 16,
        mark_concurrency: 8,
        idle_backoff_max: Duration::from_millis(200),
        shutdown_timeout: Duration::from_secs(5),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_poller_drains_only_its_regions_partitions_and_the_unstamped() {
    // Given one replica's table holding events of both regions and an unstamped one
    let env = TestEnv::new().await;
    let written = write_in_two_regions(&env, 3).await;
    let config = poller_args(&env).validate().unwrap();
    let poller_in = |region: &str| {
        relay_poller::aws::aws_poller_with(
            relay_poller::aws::AwsClients {
                dynamodb: client_in(&env, region),
                sqs: env.sqs.clone(),
            },
            env.publisher(config.publisher.clone()),
            &config,
        )
        .unwrap()
    };
    let cancel = relay_poller::CancellationToken::new();

    // When us-east-1's poller drains
    let us = poller_in(US);
    let summary = us
        .drain(&us.partitions().fixed(), Duration::ZERO, 2, &cancel)
        .await;

    // Then it published us-east-1's events and the unstamped one, and left eu-west-1's pending
    assert!(summary.complete, "{summary:?}");
    let mut expected: BTreeSet<String> = written.us.clone();
    expected.insert(written.unstamped.clone());
    let sink = env.wait_for_sink(4, Duration::from_secs(30)).await;
    assert_eq!(
        published(&sink).into_iter().collect::<BTreeSet<_>>(),
        expected
    );
    assert_eq!(summary.published, 4, "{summary:?}");
    let pending: BTreeSet<String> = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|i| i.gsi1pk.is_some())
        .map(|i| i.event_id)
        .collect();
    assert_eq!(pending, written.eu);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_whose_region_is_not_among_the_regions_refuses_to_start() {
    // Given --regions without the relay's own region (its client's: ap-south-1)
    let env = TestEnv::new().await;
    let config = poller_args(&env).validate().unwrap();

    // When the poller is built, it says which setting is wrong and why
    let err = relay_poller::aws::aws_poller_with(
        relay_poller::aws::AwsClients {
            dynamodb: client_in(&env, "ap-south-1"),
            sqs: env.sqs.clone(),
        },
        env.publisher(config.publisher.clone()),
        &config,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(
            "invalid --regions (OUTBOX_REGIONS): --regions (us-east-1,eu-west-1) does not \
             include this relay's own region ap-south-1"
        ),
        "{err}"
    );
}
