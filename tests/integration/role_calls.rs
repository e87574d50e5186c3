//! Each job calls nothing its role does not grant: the relays' binaries run through the fault
//! proxy (no faults), which records every operation they call, and each operation must be among
//! the calls the job's code lists (`relay_stream::permissions`, `relay_poller::permissions`),
//! which `infra_template` compares with the roles in the template. A call added to a binary
//! without its permission fails here, not with `AccessDeniedException` on AWS.
//!
//! The same holds for what each read of the outbox table asks for: a role may read some
//! attributes only (a `dynamodb:Attributes` condition with `dynamodb:Select`), or hold items only
//! (`dynamodb:LeadingKeys`), or the index; the proxy records each read as IAM's condition keys see
//! it, and each must be one a call of its job's list allows, as the template's statement for that
//! call does (a read without a projection is `ALL_ATTRIBUTES`, which no such statement allows).

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use outbox_shared::schema;
use outbox_tests::dynamodb_reads::Read;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item, unique_name};
use relay_runtime::permissions::{Call, Target, action_of_target};
use relay_runtime::{AggregateHolds, TargetKind};

/// The IAM actions of the operations called through `proxy` that `granted` lacks, besides
/// `platform` (calls made by the platform on the job's behalf, or by a local stand-in for it).
pub(crate) fn called_without_permission(
    proxy: &FaultProxy,
    granted: &[Call],
    platform: &[&str],
) -> Vec<String> {
    let granted: BTreeSet<&str> = granted.iter().map(|c| c.action).collect();
    proxy
        .targets()
        .iter()
        .map(|t| action_of_target(t).unwrap_or_else(|| panic!("an unknown call: {t}")))
        .filter(|a| !granted.contains(a.as_str()) && !platform.contains(&a.as_str()))
        .collect()
}

/// Whether the template's statement for `call` lets `read` through, as IAM evaluates its
/// condition: the index's reads, reads by hold keys only, or reads that name only the target's
/// attributes with a `Select` it allows.
fn allows(call: &Call, read: &Read) -> bool {
    let action = action_of_target(&format!("DynamoDB_20120810.{}", read.operation));
    if action.as_deref() != Some(call.action) {
        return false;
    }
    match call.on {
        Target::OutboxIndex => read.index.as_deref() == Some(schema::DEFAULT_INDEX_NAME),
        Target::HoldItems => {
            read.index.is_none()
                && read.leading_keys.as_ref().is_some_and(|keys| {
                    !keys.is_empty() && keys.iter().all(|k| k.starts_with("HOLD#"))
                })
        }
        Target::OutboxTable => read.index.is_none(),
        target => {
            read.index.is_none()
                && target.selects().contains(&read.select.as_str())
                && target.attributes().is_some_and(|allowed| {
                    read.attributes
                        .iter()
                        .all(|a| allowed.contains(&a.as_str()))
                })
        }
    }
}

/// The reads of the table `table` made through `proxy` that no call of `granted` allows, and how
/// many reads of it there were.
fn reads_not_granted(proxy: &FaultProxy, granted: &[Call], table: &str) -> (Vec<Read>, usize) {
    let reads: Vec<Read> = proxy
        .reads()
        .into_iter()
        .filter(|read| read.table == table)
        .collect();
    let count = reads.len();
    let refused = reads
        .into_iter()
        .filter(|read| !granted.iter().any(|call| allows(call, read)))
        .collect();
    (refused, count)
}

fn called(proxy: &FaultProxy) -> BTreeSet<String> {
    proxy
        .targets()
        .iter()
        .filter_map(|t| action_of_target(t))
        .collect()
}

fn assert_called(proxy: &FaultProxy, job: &str, actions: &[&str]) {
    let called = called(proxy);
    for action in actions {
        assert!(
            called.contains(*action),
            "{job} did not call {action}: {called:?}"
        );
    }
}

/// `relay-stream-local` reads the stream as Lambda's event source mapping does (with the
/// function's role), and finds the stream's ARN by describing the table (a local runner's call;
/// the mapping is given the ARN).
pub(crate) const STREAM_READER: &[&str] = &[
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
    "dynamodb:DescribeTable",
];

#[tokio::test]
async fn each_job_calls_only_what_its_role_grants() {
    // Given orders, and an item no relay can publish (its Payload is not JSON)
    let env = TestEnv::new().await;
    let event_ids = env.create_orders(5, 5).await;
    let poison = unique_name("poison");
    env.put_raw_item(minimal_outbox_item(
        "u-poison",
        &poison,
        "OrderCreated",
        "not json",
        "2026-11-22T10:00:00.000Z",
        1,
    ))
    .await;

    // And the first order held (an earlier event of it failed): the stream relay leaves its event
    // under the hold, and the poller service publishes it and releases the hold
    let first = env
        .outbox_items()
        .await
        .into_iter()
        .find(|item| item.event_id == event_ids[0])
        .expect("the first order's event");
    let holds = relay_runtime::DynamoHoldStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        Duration::from_secs(7 * 24 * 3600),
    );
    holds
        .hold(
            first.ordering_key(),
            &[relay_runtime::LeftEvent {
                key: first.key(),
                partition: first.gsi1pk.clone().expect("pending"),
                sort_key: first.gsi1sk.clone().expect("pending"),
            }],
        )
        .await
        .unwrap();
    // And a hold whose last event another relay published before the poller ran: the poller reads
    // that event from the table before it releases the hold
    let published_elsewhere = relay_runtime::LeftEvent {
        key: outbox_shared::ItemKey {
            pk: "USER#elsewhere".into(),
            sk: "OUTBOX#elsewhere".into(),
        },
        partition: first.gsi1pk.clone().expect("pending"),
        sort_key: outbox_shared::schema::pending_sort_key("2026-01-01T00:00:00.000Z", "elsewhere"),
    };
    holds
        .hold("order-elsewhere", &[published_elsewhere])
        .await
        .unwrap();

    // When the stream relay relays them in hold mode, as the template runs it
    let stream = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "1s"])
        .env("HOLD_FAILED_AGGREGATES", "true")
        .envs(stream.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(output.status.success(), "{output:?}");

    // Then it called only what its role grants: publishes, marks, the hold reads, the record of
    // the event it left under the hold, a dead letter and its mark
    let stream_calls = relay_stream::permissions::calls(TargetKind::Classic);
    assert_eq!(
        called_without_permission(&stream, &stream_calls, STREAM_READER),
        Vec::<String>::new()
    );
    let (refused, reads) = reads_not_granted(&stream, &stream_calls, &env.table_name);
    assert_eq!(refused, Vec::<Read>::new(), "relay-stream's reads");
    assert!(reads > 0, "relay-stream read no hold");
    assert_called(
        &stream,
        "relay-stream",
        &[
            "events:PutEvents",
            "dynamodb:PartiQLUpdate",
            "dynamodb:BatchGetItem",
            "sqs:SendMessage",
            "sqs:GetQueueAttributes",
            "dynamodb:UpdateItem",
        ],
    );

    // When the poller service's `run` shares the shards through the lease table and publishes new
    // orders, until stopped with SIGTERM
    let lease_table = unique_name("leases");
    relay_poller::assignment::create_lease_table(&env.dynamodb, &lease_table)
        .await
        .unwrap();
    env.create_orders(5, 5).await;
    let service = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 2).await;
    let mut run = env
        .relay_command("relay-poller")
        .args(["run", "--lease-table", &lease_table])
        .args(["--lease-duration", "3s", "--lease-renew-interval", "1s"])
        .args(["--grace-period", "0s", "--idle-backoff-max", "1s"])
        .args(["--sweep-interval", "1s"])
        .envs(service.endpoint_env())
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller run");
    tokio::time::timeout(Duration::from_secs(60), async {
        while env.pending_in_index().await > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the poller publishes the new orders");
    let pid = run.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("exit status");
    assert!(exit.success(), "{exit:?}");

    // Then it called only what the service's role grants: the index, marks, publishes, the leases
    let service_calls = relay_poller::permissions::service(TargetKind::Classic);
    assert_eq!(
        called_without_permission(&service, &service_calls, &[]),
        Vec::<String>::new()
    );
    // And each of its reads of the table is one its role allows: the index, and the last event a
    // hold recorded, its keys and GSI1PK only
    let (refused, reads) = reads_not_granted(&service, &service_calls, &env.table_name);
    assert_eq!(refused, Vec::<Read>::new(), "relay-poller run's reads");
    assert!(
        service.reads().iter().any(|r| r.operation == "BatchGetItem"
            && r.table == env.table_name
            && r.select == "SPECIFIC_ATTRIBUTES"),
        "the poller read no last event of a hold ({reads} reads)"
    );
    assert_called(
        &service,
        "relay-poller run",
        &[
            "dynamodb:Query",
            "dynamodb:BatchGetItem",
            "dynamodb:Scan",
            "events:PutEvents",
            "dynamodb:PartiQLUpdate",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        ],
    );

    // When an operator runs status, inspect and redrive (the dead letter back, published again,
    // dead-lettered again: its payload is still not JSON) on the operator's task
    let operator = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 3).await;
    for args in [
        vec!["status", "--json", "--lease-table", lease_table.as_str()],
        vec!["inspect", poison.as_str(), "--json"],
        vec!["redrive", "--from-table", "--dry-run", "--json"],
        vec!["redrive", "--json"],
    ] {
        let output = env
            .relay_command("relay-poller")
            .args(&args)
            .envs(operator.endpoint_env())
            .env("RUST_LOG", "error")
            .output()
            .await
            .expect("relay-poller runs");
        assert!(output.status.success(), "{args:?}: {output:?}");
    }

    // Then they called only what the operator's role grants
    let operator_calls = relay_poller::permissions::operator(TargetKind::Classic);
    assert_eq!(
        called_without_permission(&operator, &operator_calls, &[]),
        Vec::<String>::new()
    );
    // And each of their reads of the table reads an outbox item's attributes only (a projection on
    // them, or a count), never a whole item: an order's own attributes are personal data
    let (refused, reads) = reads_not_granted(&operator, &operator_calls, &env.table_name);
    assert_eq!(refused, Vec::<Read>::new(), "the operator commands' reads");
    for operation in ["GetItem", "Scan"] {
        assert!(
            operator.reads().iter().any(|r| r.operation == operation
                && r.table == env.table_name
                && r.index.is_none()),
            "the operator commands made no {operation} of the table ({reads} reads)"
        );
    }
    assert_called(
        &operator,
        "the operator commands",
        &[
            "dynamodb:Scan",
            "dynamodb:GetItem",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:SendMessage",
            "dynamodb:UpdateItem",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_discarded_batch_recovery_calls_only_what_its_roles_grant() {
    use crate::discarded_batches::{discarded_batch, put_back, recover_discarded};
    // Given a batch the local reader gave up and wrote to the bucket, as the mapping does with the
    // function's role
    let env = TestEnv::new().await;
    let discarded = discarded_batch(&env).await;
    let mut mapping = relay_stream::permissions::calls(TargetKind::Classic);
    mapping.extend_from_slice(relay_stream::permissions::ON_FAILURE_DESTINATION);
    assert_eq!(
        called_without_permission(&discarded.reader, &mapping, STREAM_READER),
        Vec::<String>::new()
    );
    assert_called(
        &discarded.reader,
        "the on-failure destination",
        &["s3:PutObject"],
    );

    // When the operator's one-off command recovers it
    let operator = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    let (code, summary) = recover_discarded(&env, &discarded.bucket, Some(&operator)).await;
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(summary["recreated"], 1, "{summary}");

    // Then it called only what the operator's role grants: the bucket's listing, the batch's read
    // and delete, the re-create
    assert_eq!(
        called_without_permission(
            &operator,
            &relay_poller::permissions::operator(TargetKind::Classic),
            &[]
        ),
        Vec::<String>::new()
    );
    assert_called(
        &operator,
        "recover-discarded",
        &[
            "s3:ListBucket",
            "s3:GetObject",
            "s3:DeleteObject",
            "dynamodb:PutItem",
        ],
    );

    // When the poller service's `run` sweeps the same batch, delivered again
    put_back(&env, &discarded).await;
    let service = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 6).await;
    let mut run = env
        .relay_command("relay-poller")
        .args(["run", "--grace-period", "0s", "--idle-backoff-max", "1s"])
        .env("DISCARDED_BATCH_BUCKET", &discarded.bucket)
        .env("DISCARDED_BATCH_INTERVAL", "1s")
        .envs(service.endpoint_env())
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller run");
    tokio::time::timeout(Duration::from_secs(60), async {
        while !env.object_keys(&discarded.bucket).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the service recovers the batch");
    let pid = run.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("exit status");
    assert!(exit.success(), "{exit:?}");

    // Then it called only what the service's role grants
    assert_eq!(
        called_without_permission(
            &service,
            &relay_poller::permissions::service(TargetKind::Classic),
            &[]
        ),
        Vec::<String>::new()
    );
    assert_called(
        &service,
        "relay-poller run",
        &[
            "s3:ListBucket",
            "s3:GetObject",
            "s3:DeleteObject",
            "dynamodb:PutItem",
        ],
    );
}

#[tokio::test]
async fn the_writer_calls_only_what_the_order_services_policy_grants() {
    use outbox_writer::{NewOrder, OrderLine, OrderStatus};
    // Given a writer whose DynamoDB calls go through the proxy
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    let writer = env.writer_through(&proxy);

    // When it creates an order idempotently, creates it again (a replay) and changes its status
    let order = || NewOrder::new(vec![OrderLine::new("sku-1", 1, 100)]).with_idempotency_key("k");
    let created = writer
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap();
    writer
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap();
    writer
        .update_order_status_with_outbox("u-1", &created.order_id, OrderStatus::Paid)
        .await
        .unwrap();

    // Then it called TransactWriteItems and GetItem only (IAM authorizes a transaction by each
    // action inside it: the Puts, the Update and any ConditionCheck, which
    // outbox_writer::TABLE_ACTIONS lists with GetItem; the proxy sees the operation, not them)
    assert_eq!(
        proxy.targets(),
        BTreeSet::from([
            "DynamoDB_20120810.GetItem".to_owned(),
            "DynamoDB_20120810.TransactWriteItems".to_owned(),
        ])
    );
    assert!(outbox_writer::TABLE_ACTIONS.contains(&"dynamodb:GetItem"));
}

#[tokio::test]
async fn the_global_table_writer_calls_only_what_the_order_services_policy_grants() {
    // Given a writer configured for a global table, its DynamoDB calls through the proxy
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    let config = outbox_writer::WriterConfig {
        global_table: true,
        ..outbox_writer::WriterConfig::new(env.outbox_config(), "test.orders")
    };
    let writer = outbox_writer::OutboxWriter::new(env.dynamodb_through(&proxy), config).unwrap();

    // When it creates two orders
    for id in ["o-1", "o-2"] {
        let order = outbox_writer::NewOrder::new(vec![outbox_writer::OrderLine::new("sku", 1, 1)])
            .with_order_id(id);
        writer.create_order_with_outbox("u-1", order).await.unwrap();
    }

    // Then it read the table's description once (DescribeTable, which TABLE_ACTIONS lists and
    // the policy grants) and wrote with TransactWriteItems
    assert_eq!(
        proxy.targets(),
        BTreeSet::from([
            "DynamoDB_20120810.DescribeTable".to_owned(),
            "DynamoDB_20120810.TransactWriteItems".to_owned(),
        ])
    );
    assert!(outbox_writer::TABLE_ACTIONS.contains(&"dynamodb:DescribeTable"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_writer_with_a_payload_bucket_calls_only_what_the_order_services_policy_grants() {
    // Given a writer with a payload bucket, its DynamoDB and S3 calls through the proxy
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&env.sdk_config)
            .endpoint_url(proxy.url())
            .build(),
    );
    let mut config = outbox_writer::WriterConfig::new(env.outbox_config(), "test.orders");
    config.payload_bucket = Some(bucket);
    let writer =
        outbox_writer::OutboxWriter::with_s3(env.dynamodb_through(&proxy), s3, config).unwrap();

    // When it writes an order whose event's payload is too large for an item
    crate::claim_check::import_order(&env, &writer, "u-1", "o-1", 10_000)
        .await
        .unwrap();

    // Then it stored the payload and committed the transaction, nothing else: the calls of
    // outbox_writer::PAYLOAD_OBJECT_ACTIONS and TABLE_ACTIONS, which the writer's policy grants
    assert_eq!(
        proxy.targets(),
        BTreeSet::from([
            "AmazonS3.PutObject".to_owned(),
            "DynamoDB_20120810.TransactWriteItems".to_owned(),
        ])
    );
    assert!(outbox_writer::PAYLOAD_OBJECT_ACTIONS.contains(&"s3:PutObject"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_writer_whose_payload_put_lost_its_reply_calls_only_what_the_order_services_policy_grants()
 {
    // Given a writer with a payload bucket, its S3 calls through the proxy, which loses the reply
    // of the first PutObject after it took effect (its SDK sends it again and finds the object)
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    proxy.lose_next_replies("AmazonS3.PutObject", 1);
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&env.sdk_config)
            .endpoint_url(proxy.url())
            .build(),
    );
    let mut config = outbox_writer::WriterConfig::new(env.outbox_config(), "test.orders");
    config.payload_bucket = Some(bucket);
    let writer = outbox_writer::OutboxWriter::with_s3(env.dynamodb.clone(), s3, config).unwrap();

    // When it writes an order whose event's payload is too large for an item
    crate::claim_check::import_order(&env, &writer, "u-1", "o-1", 10_000)
        .await
        .unwrap();

    // Then it checked the object its lost put left (HeadObject) before committing, and every S3
    // call it made is one outbox_writer::PAYLOAD_OBJECT_ACTIONS (the writer's policy) grants
    let targets = proxy.targets();
    assert!(targets.contains("AmazonS3.HeadObject"), "{targets:?}");
    for target in targets.iter().filter(|t| t.starts_with("AmazonS3.")) {
        let action = relay_runtime::permissions::action_of_target(target).expect("an S3 action");
        assert!(
            outbox_writer::PAYLOAD_OBJECT_ACTIONS.contains(&action.as_str()),
            "{target} is {action}, which the writer's policy does not grant"
        );
    }
}

on_every_target!(each_relay_publishes_to_its_target_with_only_what_its_role_grants);

async fn each_relay_publishes_to_its_target_with_only_what_its_role_grants(kind: TargetKind) {
    // Given five orders on the stream, and a target of `kind`
    let env = TestEnv::with_target(kind).await;
    env.create_orders(5, 5).await;
    let publish_action = kind.spec().calls[0].action;

    // When relay-stream-local publishes them through the proxy
    let stream = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 3).await;
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "1s"])
        .envs(stream.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(output.status.success(), "{output:?}");

    // Then it called the target's publish call and nothing its role for that kind lacks
    assert_eq!(
        called_without_permission(
            &stream,
            &relay_stream::permissions::calls(kind),
            STREAM_READER
        ),
        Vec::<String>::new(),
        "{kind}"
    );
    assert_called(&stream, "relay-stream", &[publish_action]);

    // And so does a drain of five more by the poller's service
    env.create_orders(5, 5).await;
    let service = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    let output = env
        .relay_command("relay-poller")
        .args(["drain"])
        .envs(service.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-poller drain runs");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        called_without_permission(&service, &relay_poller::permissions::service(kind), &[]),
        Vec::<String>::new(),
        "{kind}"
    );
    assert_called(&service, "relay-poller drain", &[publish_action]);
    assert_eq!(
        env.wait_for_sink(10, Duration::from_secs(30)).await.len(),
        10,
        "{kind}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_consumer_calls_only_what_its_role_grants() {
    use crate::consumer_bootstrap::{consumer_tables, order_created, publish};
    use order_consumer::{DynamoInventory, IDEMPOTENCY_TABLE_ACTIONS, STOCK_TABLE_ACTIONS};
    use outbox_consumer::occ::OccConfig;
    use outbox_consumer::{IdempotencyConfig, IdempotencyStore, Invocation, OccTable};
    use outbox_tests::lambda_events::sqs_event;

    // Given an order's OrderCreated on a standard queue, delivered twice (a re-delivery), and
    // the example consumer's processor and inventory, their DynamoDB calls through the proxy
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let (idempotency, stock_table, _) = consumer_tables(&env).await;
    let event = order_created(&env, "order-r", "order-r", 1);
    publish(&env, &event).await;
    publish(&env, &event).await;
    let batch = sqs_event(&env, &env.sink_queue_url, 2).await;
    assert_eq!(batch.records.len(), 2);
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    let dynamodb = env.dynamodb_through(&proxy);
    let store = IdempotencyStore::new(
        dynamodb.clone(),
        IdempotencyConfig {
            cache_capacity: 0,
            ..IdempotencyConfig::new(&idempotency)
        },
    )
    .unwrap();
    let inventory = DynamoInventory::new(
        OccTable::new(
            dynamodb,
            OccConfig::new(&stock_table, order_consumer::stock::attr::VERSION),
        )
        .unwrap(),
    );
    let processor = order_consumer::processor(
        outbox_consumer::PayloadResolver::new(env.s3.clone(), outbox_tests::NO_PAYLOAD_BUCKET),
        store,
    );

    // When it handles the batch
    let report =
        order_consumer::handle_sqs_batch(&batch, &Invocation::default(), &processor, &inventory)
            .await;
    assert!(
        report.sqs_response().batch_item_failures.is_empty(),
        "{report:?}"
    );

    // Then it called the store's claim and the stock's read and write, and nothing its role
    // lacks (ExampleConsumerRole grants exactly IDEMPOTENCY_TABLE_ACTIONS on its idempotency
    // table and STOCK_TABLE_ACTIONS on its stock table: infra_template)
    let lacking: Vec<String> = called(&proxy)
        .into_iter()
        .filter(|action| {
            !IDEMPOTENCY_TABLE_ACTIONS.contains(&action.as_str())
                && !STOCK_TABLE_ACTIONS.contains(&action.as_str())
        })
        .collect();
    assert_eq!(lacking, Vec::<String>::new());
    assert_eq!(
        proxy.targets().len(),
        called(&proxy).len(),
        "an unknown call: {:?}",
        proxy.targets()
    );
    assert_called(
        &proxy,
        "the example consumer",
        &[
            "dynamodb:UpdateItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
        ],
    );
}
