//! Global tables (docs/global-tables.md): the local global table itself (`replication`), and each
//! region's relays publishing the events written in their region (`published_once`).

mod replication {
    //! The outbox table as a global table on the local replicator (`outbox_tests::regions`): what a
    //! region's relays will see of events written in another region (docs/testing.md, "The local
    //! global table").

    use std::collections::HashMap;

    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_sdk_dynamodbstreams::types::OperationType;
    use outbox_shared::schema::{self, attr, status};
    use outbox_shared::{OutboxConfig, shard_for};
    use outbox_tests::regions::{GlobalTestEnv, RegionEnv};
    use outbox_tests::{TEST_SOURCE, minimal_outbox_item};
    use outbox_writer::{NewOrder, OrderLine, OutboxWriter, WriterConfig};

    type Item = HashMap<String, AttributeValue>;

    fn s(item: &Item, name: &str) -> String {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    }

    /// The items of the outbox table in `region`, by (`PK`, `SK`).
    async fn items_by_key(
        global: &GlobalTestEnv,
        region: &RegionEnv,
    ) -> HashMap<(String, String), Item> {
        region
            .scan_items(&global.env.table_name)
            .await
            .into_iter()
            .map(|item| ((s(&item, attr::PK), s(&item, attr::SK)), item))
            .collect()
    }

    /// The event ids of the outbox items the stream of `region` holds an `INSERT` of, in order.
    async fn inserted_event_ids(region: &RegionEnv) -> Vec<String> {
        region
            .stream_records()
            .await
            .into_iter()
            .filter(|r| r.event_name() == Some(&OperationType::Insert))
            .filter_map(|r| {
                let image = r.dynamodb()?.new_image()?;
                (image.get(attr::ENTITY_TYPE)?.as_s().ok()? == schema::entity::OUTBOX_EVENT)
                    .then(|| image.get(attr::EVENT_ID)?.as_s().ok().cloned())?
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn events_written_in_one_region_arrive_in_the_others_table_and_stream_once() {
        // Given the outbox table global in two regions
        let global = GlobalTestEnv::new().await;
        let (a, b) = (global.a(), global.b());
        let table = &global.env.table_name;
        // When the writer in A creates 5 orders (each order and its event one transaction)
        let writer = OutboxWriter::new(
            a.dynamodb.clone(),
            WriterConfig::new(OutboxConfig::new(table), TEST_SOURCE),
        )
        .expect("a valid writer configuration");
        let mut written = Vec::new();
        for i in 0..5 {
            let line = OrderLine::new(format!("SKU-{i}"), 1, 100);
            let created = writer
                .create_order_with_outbox(&format!("user-{i}"), NewOrder::new(vec![line]))
                .await
                .expect("order created");
            written.push(created.event_id);
        }
        // And another client writes 3 events stamped with A as their origin, under A's partitions
        for i in 0..3 {
            let event_id = format!("regional-{i}");
            let shard = shard_for(&event_id, OutboxConfig::new(table).shard_count);
            let mut item = minimal_outbox_item(
                "user-r",
                &event_id,
                "OrderCreated",
                "{}",
                "2026-11-28T12:00:00.000Z",
                shard,
            );
            item.insert(
                attr::ORIGIN_REGION.to_owned(),
                AttributeValue::S(a.region.to_string()),
            );
            item.insert(
                attr::GSI1PK.to_owned(),
                AttributeValue::S(schema::regional_pending_shard_pk(&a.region, shard)),
            );
            a.dynamodb
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .send()
                .await
                .expect("put a regional event");
            written.push(event_id);
        }
        global.replicator.wait_caught_up().await;

        // Then B holds every item A holds, attribute for attribute (OriginRegion and the regional
        // pending key included)
        let in_a = items_by_key(&global, a).await;
        let in_b = items_by_key(&global, b).await;
        assert_eq!(in_a.len(), 5 * 2 + 3, "5 orders and 8 events in A");
        assert_eq!(in_b, in_a);
        let regional = in_b
            .values()
            .filter(|item| s(item, attr::EVENT_ID).starts_with("regional-"))
            .collect::<Vec<_>>();
        assert_eq!(regional.len(), 3);
        for item in regional {
            assert_eq!(s(item, attr::ORIGIN_REGION), a.region.as_str());
            assert!(s(item, attr::GSI1PK).starts_with(&format!("OUTBOX#PENDING#{}#", a.region)));
        }
        // And each region's stream holds each event's INSERT exactly once: every region's stream
        // holds every write, and none is replicated back
        let mut expected = written.clone();
        expected.sort();
        for region in [a, b] {
            let mut inserted = inserted_event_ids(region).await;
            inserted.sort();
            assert_eq!(
                inserted, expected,
                "the INSERTs in {}'s stream",
                region.region
            );
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn two_regions_marking_one_event_while_cut_off_end_with_the_later_mark_in_both() {
        // Given a pending event in both regions, and both links cut
        let global = GlobalTestEnv::new().await;
        let (a, b) = (global.a(), global.b());
        let table = &global.env.table_name;
        let item = minimal_outbox_item(
            "user-1",
            "e1",
            "OrderCreated",
            "{}",
            "2026-11-28T12:00:00.000Z",
            0,
        );
        a.dynamodb
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .expect("put the event");
        global.replicator.wait_caught_up().await;
        assert_eq!(b.scan_items(table).await, vec![item.clone()]);
        global.replicator.isolate(&a.region, &global.regions).await;

        // When A marks it PUBLISHED, then B marks it DEAD_LETTERED, each on the condition that it is
        // still pending: a condition is checked against the local replica only, so both succeed
        for (region, mark) in [(a, status::PUBLISHED), (b, status::DEAD_LETTERED)] {
            region
                .dynamodb
                .update_item()
                .table_name(table)
                .set_key(Some(
                    [attr::PK, attr::SK]
                        .into_iter()
                        .map(|k| (k.to_owned(), item[k].clone()))
                        .collect(),
                ))
                .update_expression("SET #status = :mark REMOVE #gsi1pk, #gsi1sk")
                .condition_expression("attribute_exists(#gsi1pk)")
                .expression_attribute_names("#status", attr::STATUS)
                .expression_attribute_names("#gsi1pk", attr::GSI1PK)
                .expression_attribute_names("#gsi1sk", attr::GSI1SK)
                .expression_attribute_values(":mark", AttributeValue::S(mark.to_owned()))
                .send()
                .await
                .unwrap_or_else(|e| panic!("mark in {}: {e:?}", region.region));
            global.replicator.wait_caught_up().await;
        }
        // And the regions are connected again
        global
            .replicator
            .reconnect(&a.region, &global.regions)
            .await;
        global.replicator.wait_caught_up().await;

        // Then both hold the later mark, the earlier dropped where it arrived (last writer wins)
        for region in [a, b] {
            let items = region.scan_items(table).await;
            assert_eq!(items.len(), 1);
            assert_eq!(
                s(&items[0], attr::STATUS),
                status::DEAD_LETTERED,
                "in {}",
                region.region
            );
        }
        let from_a = global.replicator.link_stats(&a.region, &b.region).await;
        assert_eq!(from_a.dropped_as_older, 1, "{from_a:?}");
        assert_eq!(from_a.held_back, 0);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_global_environment_deletes_its_tables_from_every_region_when_dropped() {
        // Given an environment with its outbox table and a lease table in both regions
        let global = GlobalTestEnv::new().await;
        let leases = outbox_tests::unique_name("leases");
        global.create_lease_table(&leases).await;
        let tables = [global.env.table_name.clone(), leases];
        let clients = global
            .regions
            .iter()
            .map(|r| r.dynamodb.clone())
            .collect::<Vec<_>>();
        // When it is dropped
        drop(global);
        // Then no region holds them (the replicator would read them for the rest of the run)
        for client in clients {
            let listed = client.list_tables().send().await.expect("list tables");
            for table in &tables {
                assert!(!listed.table_names().contains(table), "{table} left behind");
            }
        }
    }
}

mod published_once {
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
            let mut item =
                minimal_outbox_item(&user, &event_id, "OrderCreated", "{}", &created_at, 0);
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
            let partition =
                schema::parse_pending_partition(item.gsi1pk.as_deref().unwrap()).unwrap();
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

        // When the stream relay in us-east-1 handles every record of the stream (its region
        // adopted by none: the fleet's lease table has no region items yet)
        let leases = outbox_tests::unique_name("leases");
        relay_poller::assignment::create_lease_table(&env.dynamodb, &leases)
            .await
            .unwrap();
        let relay_in = |region: &str| {
            let args = relay_stream::RelayArgs {
                regions: regions(),
                lease_table: Some(leases.clone()),
                ..fixtures::stream_relay_args(
                    &env.table_name,
                    fixtures::publisher_args(&env.bus_name),
                )
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
}
