//! The deployable template and the emulator agree: the table local provisioning creates has the
//! template's keys, index, stream and TTL, and the stream relay's filter pattern, evaluated by a
//! real event-pattern engine against real stream records, passes only outbox inserts; the lease
//! table a poller creates is the template's, and the poller service runs on leases and scales on
//! its backlog; the dead-letter queue local provisioning creates is the template's (1 MiB
//! messages), and both relays may read its size limit; each bus kind (`EventBusKind`) creates its
//! own bus, which both relays are given and may publish to, and the Custom Event Bus's example
//! FIFO subscriber delivers per aggregate into a FIFO queue.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_eventbridge::types::{PutEventsRequestEntry, Target};
use outbox_infra::Template;
use outbox_shared::schema::{self, attr, entity};
use outbox_tests::{TestEnv, unique_name};
use serde_json::{Value, json};

/// `(attribute, key type)` pairs, as both the template and DescribeTable list them.
fn pairs<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    keys.into_iter()
        .map(|(a, k)| (a.to_owned(), k.to_owned()))
        .collect()
}

#[tokio::test]
async fn local_table_has_the_templates_keys_index_stream_and_ttl() {
    // Given the template's table and a table provisioned locally from it
    let spec = Template::embedded().unwrap().outbox_table().unwrap();
    let env = TestEnv::new().await;

    // When the emulator describes the table and its TTL
    let table = env
        .dynamodb
        .describe_table()
        .table_name(&env.table_name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let ttl = env
        .dynamodb
        .describe_time_to_live()
        .table_name(&env.table_name)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();

    // Then keys, attribute types, index, stream view type and TTL attribute are the template's
    assert_eq!(
        pairs(
            table
                .key_schema()
                .iter()
                .map(|k| (k.attribute_name(), k.key_type().as_str()))
        ),
        pairs(
            spec.key_schema
                .iter()
                .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
        ),
    );
    let described_attrs: BTreeMap<_, _> = table
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name(), a.attribute_type().as_str()))
        .collect();
    let declared_attrs: BTreeMap<_, _> = spec
        .attribute_definitions
        .iter()
        .map(|a| (a.attribute_name.as_str(), a.attribute_type.as_str()))
        .collect();
    assert_eq!(described_attrs, declared_attrs);

    let indexes = table.global_secondary_indexes();
    assert_eq!(indexes.len(), spec.global_secondary_indexes.len());
    for declared in &spec.global_secondary_indexes {
        let described = indexes
            .iter()
            .find(|i| i.index_name() == Some(declared.index_name.as_str()))
            .unwrap_or_else(|| panic!("index {} is missing", declared.index_name));
        assert_eq!(
            pairs(
                described
                    .key_schema()
                    .iter()
                    .map(|k| (k.attribute_name(), k.key_type().as_str()))
            ),
            pairs(
                declared
                    .key_schema
                    .iter()
                    .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            ),
        );
        assert_eq!(
            described
                .projection()
                .and_then(|p| p.projection_type())
                .map(|t| t.as_str()),
            Some(declared.projection.projection_type.as_str())
        );
    }
    assert!(
        indexes
            .iter()
            .any(|i| i.index_name() == Some(schema::DEFAULT_INDEX_NAME))
    );

    let stream = table.stream_specification().unwrap();
    assert!(stream.stream_enabled());
    assert_eq!(
        stream.stream_view_type().map(|v| v.as_str()),
        spec.stream_specification
            .as_ref()
            .map(|s| s.stream_view_type.as_str())
    );
    assert!(
        table
            .latest_stream_arn()
            .is_some_and(|a| a == env.stream_arn)
    );

    let declared_ttl = spec.time_to_live_specification.unwrap();
    assert_eq!(
        ttl.attribute_name(),
        Some(declared_ttl.attribute_name.as_str())
    );
    assert_eq!(ttl.attribute_name(), Some(attr::TTL));
    assert_eq!(
        ttl.time_to_live_status().map(|s| s.as_str()),
        Some("ENABLED")
    );
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// Every record on the table's stream, as Lambda delivers it to the function (the JSON that
/// event-source-mapping filters are evaluated against).
async fn stream_records_as_lambda_sees_them(env: &TestEnv) -> Vec<Value> {
    let image = |image: Option<&HashMap<_, _>>| {
        image.map(|i| serde_json::to_value(serde_dynamo::Item::from(i.clone())).unwrap())
    };
    env.stream_records()
        .await
        .iter()
        .map(|record| {
            let change = record.dynamodb().unwrap();
            let mut dynamodb = json!({
                "Keys": image(change.keys()),
                "SequenceNumber": change.sequence_number(),
                "StreamViewType": change.stream_view_type().map(|v| v.as_str()),
            });
            if let Some(new_image) = image(change.new_image()) {
                dynamodb["NewImage"] = new_image;
            }
            if let Some(old_image) = image(change.old_image()) {
                dynamodb["OldImage"] = old_image;
            }
            json!({
                "eventID": record.event_id(),
                "eventName": record.event_name().map(|n| n.as_str()),
                "eventSource": "aws:dynamodb",
                "eventSourceARN": env.stream_arn,
                "awsRegion": record.aws_region(),
                "dynamodb": dynamodb,
            })
        })
        .collect()
}

/// The records the template's filter pattern matches, evaluated by the emulator's EventBridge
/// pattern engine (Lambda filter criteria use EventBridge pattern syntax): each record is put on a
/// bus as an event's `detail`, behind a rule with the pattern nested under `detail`.
async fn records_matching(env: &TestEnv, pattern: &str, records: &[Value]) -> Vec<String> {
    let pattern: Value = serde_json::from_str(pattern).unwrap();
    let matched_queue = env.create_queue(&unique_name("filter-matched")).await;
    let rule = unique_name("stream-filter");
    env.eventbridge
        .put_rule()
        .name(&rule)
        .event_bus_name(&env.bus_name)
        .event_pattern(json!({ "detail": pattern }).to_string())
        .send()
        .await
        .unwrap();
    env.eventbridge
        .put_targets()
        .rule(&rule)
        .event_bus_name(&env.bus_name)
        .targets(
            Target::builder()
                .id("matched")
                .arn(env.queue_arn(&matched_queue).await)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    for record in records {
        let out = env
            .eventbridge
            .put_events()
            .entries(
                PutEventsRequestEntry::builder()
                    .event_bus_name(&env.bus_name)
                    .source("test.stream-records")
                    .detail_type("StreamRecord")
                    .detail(record.to_string())
                    .build(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_entry_count(), 0);
    }
    let mut matched: Vec<String> = env
        .drain_queue(&matched_queue)
        .await
        .iter()
        .map(|m| {
            let event: Value = serde_json::from_str(m.body().unwrap()).unwrap();
            event["detail"]["eventID"].as_str().unwrap().to_owned()
        })
        .collect();
    matched.sort();
    matched
}

#[tokio::test]
async fn stream_filter_passes_outbox_inserts_and_ttl_deletions_of_pending_events_only() {
    // Given an order INSERT, an outbox INSERT, a MODIFY of the outbox item and a REMOVE of the
    // order on the table's stream
    let env = TestEnv::new().await;
    let pk = schema::user_pk("u-1");
    let order_sk = schema::order_sk("o-1");
    let outbox_sk = schema::outbox_sk("e-1");
    env.dynamodb
        .put_item()
        .table_name(&env.table_name)
        .item(attr::PK, s(&pk))
        .item(attr::SK, s(&order_sk))
        .item(attr::ENTITY_TYPE, s(entity::ORDER))
        .item(attr::ORDER_ID, s("o-1"))
        .send()
        .await
        .unwrap();
    env.dynamodb
        .put_item()
        .table_name(&env.table_name)
        .item(attr::PK, s(&pk))
        .item(attr::SK, s(&outbox_sk))
        .item(attr::ENTITY_TYPE, s(entity::OUTBOX_EVENT))
        .item(attr::EVENT_ID, s("e-1"))
        .item(attr::EVENT_TYPE, s("OrderCreated"))
        .item(attr::STATUS, s(schema::status::PENDING))
        .item(attr::GSI1PK, s(&schema::pending_shard_pk(3)))
        .item(
            attr::GSI1SK,
            s(&schema::pending_sort_key("2026-11-22T10:00:00.000Z", "e-1")),
        )
        .send()
        .await
        .unwrap();
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key(attr::PK, s(&pk))
        .key(attr::SK, s(&outbox_sk))
        .update_expression("SET #status = :published REMOVE #gsi1pk, #gsi1sk")
        .expression_attribute_names("#status", attr::STATUS)
        .expression_attribute_names("#gsi1pk", attr::GSI1PK)
        .expression_attribute_names("#gsi1sk", attr::GSI1SK)
        .expression_attribute_values(":published", s(schema::status::PUBLISHED))
        .send()
        .await
        .unwrap();
    env.dynamodb
        .delete_item()
        .table_name(&env.table_name)
        .key(attr::PK, s(&pk))
        .key(attr::SK, s(&order_sk))
        .send()
        .await
        .unwrap();
    let records = stream_records_as_lambda_sees_them(&env).await;
    let names: Vec<_> = records
        .iter()
        .map(|r| r["eventName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["INSERT", "INSERT", "MODIFY", "REMOVE"]);
    let outbox_insert = records[1]["eventID"].as_str().unwrap().to_owned();

    // And, as Lambda delivers them, a TTL deletion of a pending outbox item and a user's delete
    // of another (recorded from the emulator by stream_fixtures)
    let mut records = records;
    let removals: Value = serde_json::from_str(REMOVALS_OF_PENDING_EVENTS).unwrap();
    let removals = removals["Records"].as_array().unwrap();
    let ttl_removal = removals
        .iter()
        .find(|r| r["userIdentity"]["principalId"] == "dynamodb.amazonaws.com")
        .expect("the fixture has a TTL deletion")["eventID"]
        .as_str()
        .unwrap()
        .to_owned();
    records.extend(removals.iter().cloned());

    // When the template's filter patterns are evaluated against those records (Lambda ORs them)
    let patterns = Template::embedded()
        .unwrap()
        .stream_filter_patterns()
        .unwrap();
    assert_eq!(patterns.len(), 2, "{patterns:?}");
    let mut matched = Vec::new();
    for pattern in &patterns {
        matched.extend(records_matching(&env, pattern, &records).await);
    }
    matched.sort();

    // Then only the outbox INSERT and the TTL deletion pass: not the order INSERT, the MODIFY,
    // the order's REMOVE or the user's delete of a pending outbox item
    let mut expected = vec![outbox_insert, ttl_removal];
    expected.sort();
    assert_eq!(matched, expected);
}

const REMOVALS_OF_PENDING_EVENTS: &str =
    include_str!("../fixtures/stream/removals-of-pending-events.json");

/// A resource's properties as JSON; `!Ref X` reads as `{"!Ref": "X"}`.
fn properties(template: &Template, logical_id: &str) -> Value {
    serde_json::to_value(&template.resource(logical_id).unwrap().properties).unwrap()
}

/// The poller task's `Environment` entries (`{Name, Value}`, or an `!If` around one).
fn poller_environment(template: &Template) -> Vec<Value> {
    let task = properties(template, "PollerTaskDefinition");
    task["ContainerDefinitions"][0]["Environment"]
        .as_array()
        .expect("the poller task has an environment")
        .clone()
}

fn is_ref_to(value: &Value, parameter: &str) -> bool {
    value.get("!Ref").and_then(Value::as_str) == Some(parameter)
        || value.as_str() == Some(&format!("!Ref {parameter}"))
}

#[test]
fn both_relays_emit_metrics_in_the_templates_namespace_and_the_alarms_watch_what_they_emit() {
    use relay_runtime::metrics::{
        COUNTED_OPERATIONS, FAILED_CALLS, OLDEST_PENDING_AGE, OPERATION_DIMENSION, RELAY_DIMENSION,
    };
    let template = Template::embedded().unwrap();

    // The Lambda and the poller task read METRICS_NAMESPACE from the MetricsNamespace parameter
    let lambda = properties(&template, "RelayFunction");
    let namespace = &lambda["Environment"]["Variables"]["METRICS_NAMESPACE"];
    assert!(is_ref_to(namespace, "MetricsNamespace"), "{namespace}");
    let env = poller_environment(&template);
    let namespace = env
        .iter()
        .find(|v| v["Name"] == "METRICS_NAMESPACE")
        .expect("the poller task sets METRICS_NAMESPACE");
    assert!(
        is_ref_to(&namespace["Value"], "MetricsNamespace"),
        "{namespace}"
    );

    // The oldest-pending alarm watches the metric and dimension the poller emits
    let oldest = properties(&template, "OldestPendingAgeAlarm");
    assert!(is_ref_to(&oldest["Namespace"], "MetricsNamespace"));
    assert_eq!(oldest["MetricName"], OLDEST_PENDING_AGE);
    assert_eq!(oldest["Dimensions"][0]["Name"], RELAY_DIMENSION);
    assert_eq!(
        oldest["Dimensions"][0]["Value"],
        relay_poller::poller::ORIGIN
    );
    assert_eq!(oldest["TreatMissingData"], "breaching");

    // The failed-calls alarm sums FailedCalls of every operation each relay makes
    let failed = properties(&template, "FailedCallsAlarm");
    let mut watched: Vec<(String, String)> = Vec::new();
    for metric in failed["Metrics"].as_array().unwrap() {
        let Some(stat) = metric.get("MetricStat") else {
            continue;
        };
        let metric = &stat["Metric"];
        assert!(is_ref_to(&metric["Namespace"], "MetricsNamespace"));
        assert_eq!(metric["MetricName"], FAILED_CALLS);
        let dims = metric["Dimensions"].as_array().unwrap();
        assert_eq!(dims[0]["Name"], RELAY_DIMENSION);
        assert_eq!(dims[1]["Name"], OPERATION_DIMENSION);
        watched.push((
            dims[0]["Value"].as_str().unwrap().to_owned(),
            dims[1]["Value"].as_str().unwrap().to_owned(),
        ));
    }
    for operation in COUNTED_OPERATIONS {
        assert!(
            watched.contains(&(
                relay_poller::poller::ORIGIN.to_owned(),
                (*operation).to_owned()
            )),
            "the poller's {operation} is not watched: {watched:?}"
        );
    }
    for operation in [
        "UpdateItem",
        "BatchExecuteStatement",
        "PutEvents",
        "SendMessage",
    ] {
        assert!(
            watched.contains(&(
                relay_stream::handler::ORIGIN.to_owned(),
                operation.to_owned()
            )),
            "the stream relay's {operation} is not watched: {watched:?}"
        );
    }
    // CloudWatch's hard limit for an alarm on a metric math expression
    assert!(
        watched.len() <= 10,
        "{} metrics: {watched:?}",
        watched.len()
    );
}

#[tokio::test]
async fn the_lease_table_a_poller_creates_is_the_templates() {
    // Given the template's lease table and one `relay-poller run --create-lease-table` creates
    use relay_poller::lease::attr as lease_attr;
    let spec = Template::embedded().unwrap().lease_table().unwrap();
    let env = TestEnv::new().await;
    let name = unique_name("leases");
    relay_poller::lease::create_lease_table(&env.dynamodb, &name)
        .await
        .unwrap();
    // (a second poller starting at the same time finds it created)
    relay_poller::lease::create_lease_table(&env.dynamodb, &name)
        .await
        .unwrap();

    // When the emulator describes it
    let table = env
        .dynamodb
        .describe_table()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let ttl = env
        .dynamodb
        .describe_time_to_live()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();

    // Then keys, billing and TTL are the template's, named as the poller names them
    let keys: Vec<(String, String)> = table
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect();
    let template_keys: Vec<(String, String)> = spec
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.clone(), k.key_type.clone()))
        .collect();
    assert_eq!(keys, template_keys);
    assert_eq!(keys, pairs([(lease_attr::LEASE_KEY, "HASH")]));
    assert_eq!(spec.billing_mode, "PAY_PER_REQUEST");
    assert_eq!(
        table
            .billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map(|b| b.as_str()),
        Some("PAY_PER_REQUEST")
    );
    let template_ttl = spec.time_to_live_specification.unwrap();
    assert!(template_ttl.enabled);
    assert_eq!(template_ttl.attribute_name, lease_attr::TTL);
    assert_eq!(ttl.attribute_name(), Some(lease_attr::TTL));
    assert!(
        spec.stream_specification.is_none(),
        "heartbeats stay off any stream"
    );
}

#[test]
fn the_poller_service_runs_on_leases_and_scales_on_its_backlog() {
    let template = Template::embedded().unwrap();

    // The task's `run` gets the lease table, and its role may use it and nothing more on it
    let env = poller_environment(&template);
    let lease_table = env
        .iter()
        .find(|v| v["Name"] == "OUTBOX_LEASE_TABLE")
        .expect("the poller task sets OUTBOX_LEASE_TABLE");
    assert!(
        is_ref_to(&lease_table["Value"], "LeaseTable"),
        "{lease_table}"
    );
    let role = properties(&template, "PollerTaskRole");
    let statements: Vec<&Value> = role["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| st["Resource"].to_string().contains("LeaseTable"))
        .collect();
    assert_eq!(statements.len(), 1, "{statements:?}");
    let mut actions: Vec<&str> = statements[0]["Action"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            "dynamodb:DeleteItem",
            "dynamodb:PutItem",
            "dynamodb:Scan",
            "dynamodb:UpdateItem"
        ]
    );

    // The service's task count belongs to the scaling (no DesiredCount to reset it), and a
    // deployment starts new tasks before it stops old ones
    let service = properties(&template, "PollerService");
    assert!(service.get("DesiredCount").is_none(), "{service}");
    assert_eq!(
        service["DeploymentConfiguration"]["MinimumHealthyPercent"],
        100
    );
    let target = properties(&template, "PollerScalableTarget");
    assert!(is_ref_to(&target["MinCapacity"], "PollerMinCount"));
    assert!(is_ref_to(&target["MaxCapacity"], "PollerMaxCount"));
    assert_eq!(target["ScalableDimension"], "ecs:service:DesiredCount");

    // It tracks the backlog metric the poller emits, per task
    let policy = properties(&template, "PollerBacklogScaling");
    let tracking = &policy["TargetTrackingScalingPolicyConfiguration"];
    assert!(is_ref_to(&tracking["TargetValue"], "PollerBacklogTarget"));
    let metric = &tracking["CustomizedMetricSpecification"];
    assert_eq!(metric["MetricName"], relay_runtime::metrics::BACKLOG);
    assert!(is_ref_to(&metric["Namespace"], "MetricsNamespace"));
    assert_eq!(
        metric["Dimensions"][0]["Name"],
        relay_runtime::metrics::RELAY_DIMENSION
    );
    assert_eq!(
        metric["Dimensions"][0]["Value"],
        relay_poller::poller::ORIGIN
    );
    assert_eq!(metric["Statistic"], "Average");
}

#[test]
fn both_relays_take_the_publish_rate_ceiling_from_the_template_only_when_one_is_set() {
    use clap::Args;
    let template = Template::embedded().unwrap();

    // The variable is the one the relays' publisher flags read
    let flags = relay_runtime::PublisherArgs::augment_args(clap::Command::new("relay"));
    let ceiling = flags
        .get_arguments()
        .find(|a| a.get_id() == "max_publish_rate")
        .expect("--max-publish-rate");
    assert_eq!(
        ceiling.get_env().and_then(|e| e.to_str()),
        Some("MAX_PUBLISH_RATE")
    );

    // The Lambda gets MAX_PUBLISH_RATE from MaxPublishRate, and no variable at all when it is 0
    // (the relays refuse a ceiling of 0)
    let lambda = properties(&template, "RelayFunction");
    let value = &lambda["Environment"]["Variables"]["MAX_PUBLISH_RATE"];
    let args = value["!If"].as_array().unwrap_or_else(|| panic!("{value}"));
    assert_eq!(args[0], "HasMaxPublishRate");
    assert!(is_ref_to(&args[1], "MaxPublishRate"), "{value}");
    assert!(is_ref_to(&args[2], "AWS::NoValue"), "{value}");

    // And so does the poller task
    let env = poller_environment(&template);
    let entry = env
        .iter()
        .find_map(|v| {
            v["!If"]
                .as_array()
                .filter(|args| args[1]["Name"] == "MAX_PUBLISH_RATE")
        })
        .expect("the poller task sets MAX_PUBLISH_RATE behind a condition");
    assert_eq!(entry[0], "HasMaxPublishRate");
    assert!(is_ref_to(&entry[1]["Value"], "MaxPublishRate"), "{entry:?}");
    assert!(is_ref_to(&entry[2], "AWS::NoValue"), "{entry:?}");

    // And the condition is "the parameter is not 0", 0 being its default
    let yaml = outbox_infra::TEMPLATE_YAML;
    assert!(
        yaml.contains("HasMaxPublishRate: !Not [!Equals [!Ref MaxPublishRate, 0]]"),
        "the condition"
    );
    assert!(
        yaml.contains("  MaxPublishRate:\n    Type: Number\n    Default: 0\n"),
        "the parameter's default"
    );
}

/// The actions of `role`'s statements, each with its statement's resources as JSON text.
fn role_actions(template: &Template, role: &str) -> Vec<(String, String)> {
    let role = properties(template, role);
    let mut found = Vec::new();
    for policy in role["Policies"].as_array().unwrap() {
        for statement in policy["PolicyDocument"]["Statement"].as_array().unwrap() {
            let actions = match &statement["Action"] {
                Value::Array(actions) => actions.clone(),
                one => vec![one.clone()],
            };
            for action in actions {
                found.push((
                    action.as_str().unwrap().to_owned(),
                    statement["Resource"].to_string(),
                ));
            }
        }
    }
    found
}

#[tokio::test]
async fn the_dead_letter_queue_takes_the_largest_messages_and_both_relays_may_read_its_limit() {
    use aws_sdk_sqs::types::QueueAttributeName;
    use outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES;
    let template = Template::embedded().unwrap();

    // The template's dead-letter queue takes SQS's largest messages (1 MiB)
    let declared = template.scalar_properties("DeadLetterQueue").unwrap();
    assert_eq!(
        declared["MaximumMessageSize"],
        SQS_MESSAGE_ABSOLUTE_MAX_BYTES.to_string()
    );

    // And the queue local provisioning creates has the template's attributes
    let env = TestEnv::new().await;
    let names = [
        QueueAttributeName::MaximumMessageSize,
        QueueAttributeName::MessageRetentionPeriod,
        QueueAttributeName::VisibilityTimeout,
    ];
    let attributes = env
        .sqs
        .get_queue_attributes()
        .queue_url(&env.dead_letter_queue_url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    for name in names {
        assert_eq!(
            attributes.get(&name),
            Some(&declared[name.as_str()]),
            "{name}"
        );
    }

    // And both relays' roles may read the dead-letter queue's attributes (the sink reads its
    // MaximumMessageSize once), on that queue only
    for role in ["RelayFunctionRole", "PollerTaskRole"] {
        let reads: Vec<String> = role_actions(&template, role)
            .into_iter()
            .filter(|(action, _)| action == "sqs:GetQueueAttributes")
            .map(|(_, resource)| resource)
            .collect();
        assert!(
            !reads.is_empty(),
            "{role} may not read the queue's attributes"
        );
        assert!(
            reads
                .iter()
                .all(|r| r.contains("DeadLetterQueue.Arn") && !r.contains("StreamFailureQueue")),
            "{role}: {reads:?}"
        );
    }
}

/// The template as CloudFormation creates it for `EventBusKind` = `kind`.
fn for_bus_kind(kind: &str) -> Template {
    use outbox_infra::template::parameter::EVENT_BUS_KIND;
    Template::embedded()
        .unwrap()
        .with_parameters(&[(EVENT_BUS_KIND, kind)])
        .unwrap()
}

/// The poller task's environment entry `name`'s value.
fn poller_variable(template: &Template, name: &str) -> Value {
    poller_environment(template)
        .into_iter()
        .find(|v| v["Name"] == name)
        .unwrap_or_else(|| panic!("the poller task sets {name}"))["Value"]
        .clone()
}

#[test]
fn each_bus_kind_gives_both_relays_its_bus_and_kind_and_lets_them_publish_to_that_bus_only() {
    use clap::Args;
    use outbox_infra::template::logical_id::{CUSTOM_EVENT_BUS, EVENT_BUS};
    use outbox_infra::template::parameter::{CLASSIC, CUSTOM};

    // The variables are the ones the relays' publisher flags read, and the kinds the values
    // they accept
    let flags = relay_runtime::PublisherArgs::augment_args(clap::Command::new("relay"));
    let env_of = |id: &str| {
        flags
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_env())
            .and_then(|e| e.to_str())
            .map(str::to_owned)
    };
    assert_eq!(env_of("event_bus_kind").as_deref(), Some("EVENT_BUS_KIND"));
    assert_eq!(env_of("event_bus_name").as_deref(), Some("EVENT_BUS_NAME"));
    assert_eq!(relay_runtime::BusKind::VALUES, [CLASSIC, CUSTOM]);

    // The bus each kind creates, and how the relays' setting and IAM statement name it: the
    // classic bus by name, its ARN from GetAtt; the Custom Event Bus by its ARN, its Ref
    for (kind, bus, name_value, arn_value) in [
        (
            CLASSIC,
            EVENT_BUS,
            json!({"!Ref": EVENT_BUS}),
            json!({"!GetAtt": "EventBus.Arn"}),
        ),
        (
            CUSTOM,
            CUSTOM_EVENT_BUS,
            json!({"!Ref": CUSTOM_EVENT_BUS}),
            json!({"!Ref": CUSTOM_EVENT_BUS}),
        ),
    ] {
        // Given the template for that bus kind
        let template = for_bus_kind(kind);
        assert!(template.resources.contains_key(bus), "{kind}: no {bus}");

        // When the relays' environments are read
        let lambda = properties(&template, "RelayFunction");
        let variables = &lambda["Environment"]["Variables"];

        // Then both relays get the kind (the parameter, so `classic` or `custom`) and the bus
        assert!(
            is_ref_to(&variables["EVENT_BUS_KIND"], "EventBusKind"),
            "{variables}"
        );
        assert!(is_ref_to(
            &poller_variable(&template, "EVENT_BUS_KIND"),
            "EventBusKind"
        ));
        assert_eq!(variables["EVENT_BUS_NAME"], name_value, "{kind}");
        assert_eq!(
            poller_variable(&template, "EVENT_BUS_NAME"),
            name_value,
            "{kind}"
        );

        // And both roles may call events:PutEvents on that bus's ARN, and nothing under the
        // eventsv2:/eventbridgev2: prefixes IAM accepts but that grants nothing
        for role in ["RelayFunctionRole", "PollerTaskRole"] {
            let actions = role_actions(&template, role);
            let publish: Vec<&String> = actions
                .iter()
                .filter(|(action, _)| action == "events:PutEvents")
                .map(|(_, resource)| resource)
                .collect();
            assert_eq!(publish, [&arn_value.to_string()], "{kind} {role}");
            assert!(
                actions
                    .iter()
                    .all(|(action, _)| action.starts_with("events:") || !action.contains("events")),
                "{kind} {role}: {actions:?}"
            );
        }
    }
    // The default is the classic bus
    let default = Template::embedded().unwrap().with_parameters(&[]).unwrap();
    assert_eq!(
        default.resources.keys().collect::<Vec<_>>(),
        for_bus_kind(CLASSIC).resources.keys().collect::<Vec<_>>()
    );
}

#[test]
fn the_custom_bus_retains_events_and_its_fifo_subscriber_delivers_each_aggregate_in_order() {
    use outbox_infra::template::logical_id::{
        CUSTOM_EVENT_BUS, ORDER_EVENTS_DELIVERY_FAILURE_QUEUE, ORDER_EVENTS_DELIVERY_ROLE,
        ORDER_EVENTS_QUEUE, ORDER_EVENTS_SUBSCRIBER,
    };
    use outbox_infra::template::parameter::{CUSTOM, CUSTOM_BUS_RETENTION_DAYS};
    let template = for_bus_kind(CUSTOM);

    // The bus is named by EventBusName and keeps events for the retention parameter, whose
    // range is the documented 1 to 365 days
    let bus = properties(&template, CUSTOM_EVENT_BUS);
    assert_eq!(
        template.resources[CUSTOM_EVENT_BUS].resource_type,
        "AWS::EventsV2::EventBus"
    );
    assert!(is_ref_to(&bus["Name"], "EventBusName"), "{bus}");
    assert!(
        is_ref_to(
            &bus["StorageConfiguration"]["RetentionPeriodInDays"],
            CUSTOM_BUS_RETENTION_DAYS
        ),
        "{bus}"
    );
    assert!(
        outbox_infra::TEMPLATE_YAML.contains(&format!(
            "  {CUSTOM_BUS_RETENTION_DAYS}:\n    Type: Number\n    Default: 14\n    MinValue: 1\n    MaxValue: 365\n"
        )),
        "the retention parameter and its range"
    );

    // The subscriber on it is FIFO, into the FIFO queue, each aggregate (the event group) one
    // message group, with a per-message dedup id (a constant would make SQS drop every message
    // after the first)
    let subscriber = properties(&template, ORDER_EVENTS_SUBSCRIBER);
    assert_eq!(
        template.resources[ORDER_EVENTS_SUBSCRIBER].resource_type,
        "AWS::EventsV2::Subscriber"
    );
    assert_eq!(subscriber["EventBusArn"], json!({"!Ref": CUSTOM_EVENT_BUS}));
    assert_eq!(subscriber["Type"], "FIFO");
    let invoke = &subscriber["InvokeConfiguration"];
    assert_eq!(
        invoke["TargetArn"],
        json!({"!GetAtt": format!("{ORDER_EVENTS_QUEUE}.Arn")})
    );
    assert_eq!(
        invoke["RoleArn"],
        json!({"!GetAtt": format!("{ORDER_EVENTS_DELIVERY_ROLE}.Arn")})
    );
    assert_eq!(
        invoke["SqsParameters"]["MessageGroupId"],
        "{% $events.SystemMetadata.EventGroupId %}"
    );
    let dedup = invoke["SqsParameters"]["MessageDeduplicationId"]
        .as_str()
        .unwrap();
    assert!(dedup.starts_with("{%") && dedup.ends_with("%}"), "{dedup}");
    assert_eq!(
        subscriber["OnFailureConfiguration"]["Arn"],
        json!({"!GetAtt": format!("{ORDER_EVENTS_DELIVERY_FAILURE_QUEUE}.Arn")})
    );
    // (the transform is the default RAW: the classic envelope, as consumers of the classic bus get)
    assert!(subscriber.get("Transformer").is_none(), "{subscriber}");

    // Both queues are FIFO (AWS requires a FIFO dead-letter queue for a FIFO subscriber)
    for queue in [ORDER_EVENTS_QUEUE, ORDER_EVENTS_DELIVERY_FAILURE_QUEUE] {
        let declared = template.scalar_properties(queue).unwrap();
        assert_eq!(declared["FifoQueue"], "true", "{queue}");
    }

    // The delivery role trusts EventBridge in this account and may send to those two queues only
    let role = properties(&template, ORDER_EVENTS_DELIVERY_ROLE);
    let trust = &role["AssumeRolePolicyDocument"]["Statement"][0];
    assert_eq!(trust["Principal"]["Service"], "events.amazonaws.com");
    assert_eq!(trust["Action"], "sts:AssumeRole");
    assert!(is_ref_to(
        &trust["Condition"]["StringEquals"]["aws:SourceAccount"],
        "AWS::AccountId"
    ));
    let actions = role_actions(&template, ORDER_EVENTS_DELIVERY_ROLE);
    let expected = json!([
        {"!GetAtt": format!("{ORDER_EVENTS_QUEUE}.Arn")},
        {"!GetAtt": format!("{ORDER_EVENTS_DELIVERY_FAILURE_QUEUE}.Arn")}
    ])
    .to_string();
    assert_eq!(actions, [("sqs:SendMessage".to_owned(), expected)]);
}
