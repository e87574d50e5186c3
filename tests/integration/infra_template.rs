//! The deployable template and the emulator agree: the table local provisioning creates has the
//! template's keys, index, stream and TTL, and the stream relay's filter pattern, evaluated by a
//! real event-pattern engine against real stream records, passes only outbox inserts; the lease
//! table a poller creates is the template's, and the poller service runs on leases and scales on
//! its backlog; the dead-letter queue local provisioning creates is the template's (1 MiB
//! messages), and both relays may read its size limit; each bus kind (`EventBusKind`) creates its
//! own bus, which both relays are given and may publish to, and the Custom Event Bus's example
//! FIFO subscriber delivers per aggregate into a FIFO queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_eventbridge::types::{PutEventsRequestEntry, Target};
use outbox_infra::Template;
use outbox_shared::schema::{self, attr, entity};
use outbox_tests::{TestEnv, unique_name};
use relay_runtime::TargetKind;
use serde_json::{Value, json};

/// `(attribute, key type)` pairs, as both the template and DescribeTable list them.
fn pairs<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    keys.into_iter()
        .map(|(a, k)| (a.to_owned(), k.to_owned()))
        .collect()
}

/// A table as the emulator describes it, and its TTL.
async fn described(
    env: &TestEnv,
    table: &str,
) -> (
    aws_sdk_dynamodb::types::TableDescription,
    aws_sdk_dynamodb::types::TimeToLiveDescription,
) {
    let described = env
        .dynamodb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let ttl = env
        .dynamodb
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    (described, ttl)
}

/// A described table's key schema as (attribute, key type) pairs.
fn described_keys(table: &aws_sdk_dynamodb::types::TableDescription) -> Vec<(String, String)> {
    table
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect()
}

/// A template table's key schema as (attribute, key type) pairs.
fn template_keys(key_schema: &[outbox_infra::template::KeyElement]) -> Vec<(String, String)> {
    key_schema
        .iter()
        .map(|k| (k.attribute_name.clone(), k.key_type.clone()))
        .collect()
}

#[tokio::test]
async fn local_table_has_the_templates_keys_index_stream_and_ttl() {
    // Given the template's table and a table provisioned locally from it
    let spec = Template::embedded().unwrap().outbox_table().unwrap();
    let env = TestEnv::new().await;

    // When the emulator describes the table and its TTL
    let (table, ttl) = described(&env, &env.table_name).await;

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
        .stream_filter_patterns_in("us-east-1")
        .unwrap();
    assert_eq!(patterns.len(), 3, "{patterns:?}");
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

#[tokio::test]
async fn on_a_global_table_the_stream_filter_passes_the_stacks_regions_inserts_and_unstamped_ones()
{
    // Given outbox INSERTs stamped with the stack's region (us-east-1), with another region
    // (replicated from eu-west-1), and with none (another client's), on the table's stream
    let env = TestEnv::new().await;
    for (event_id, origin) in [
        ("e-us", Some("us-east-1")),
        ("e-eu", Some("eu-west-1")),
        ("e-none", None),
    ] {
        let mut put = env
            .dynamodb
            .put_item()
            .table_name(&env.table_name)
            .item(attr::PK, s(&schema::user_pk("u-1")))
            .item(attr::SK, s(&schema::outbox_sk(event_id)))
            .item(attr::ENTITY_TYPE, s(entity::OUTBOX_EVENT))
            .item(attr::EVENT_ID, s(event_id))
            .item(attr::STATUS, s(schema::status::PENDING));
        if let Some(origin) = origin {
            put = put.item(attr::ORIGIN_REGION, s(origin));
        }
        put.send().await.unwrap();
    }
    let records = stream_records_as_lambda_sees_them(&env).await;
    let id_of = |event_id: &str| {
        records
            .iter()
            .find(|r| r["dynamodb"]["NewImage"][attr::EVENT_ID]["S"] == event_id)
            .expect("the record")["eventID"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // When the filter patterns of the stack in us-east-1 are evaluated against them
    let patterns = Template::embedded()
        .unwrap()
        .stream_filter_patterns_in("us-east-1")
        .unwrap();
    let mut matched = Vec::new();
    for pattern in &patterns {
        matched.extend(records_matching(&env, pattern, &records).await);
    }
    matched.sort();

    // Then the stack's region's INSERT and the unstamped one pass (the handler leaves the
    // unstamped to the first region listed), the other region's does not
    let mut expected = vec![id_of("e-us"), id_of("e-none")];
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
    use relay_runtime::metrics::OLDEST_PENDING_AGE;
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
    assert_watches_the_pollers_metric(&oldest, OLDEST_PENDING_AGE);
    assert_eq!(oldest["TreatMissingData"], "breaching");

    // The failed-calls alarm sums FailedCalls over every operation of both relays: one Metrics
    // Insights query over the dimensions every FailedCalls carries (Relay, Operation), no list of
    // operations to fall behind the code
    let failed = properties(&template, "FailedCallsAlarm");
    let metrics = failed["Metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    assert!(metrics[0].get("MetricStat").is_none());
    assert_eq!(metrics[0]["ReturnData"], true);
    assert_eq!(metrics[0]["Period"], 300);
    assert_eq!(
        metrics[0]["Expression"]["!Sub"],
        failed_calls_query(""),
        "{metrics:?}"
    );
}

#[test]
fn every_alarm_of_the_template_has_its_row_in_the_runbook() {
    // Given the alarms of the template, whatever their conditions
    let template = Template::embedded().unwrap();
    let alarms: Vec<&String> = template
        .resources
        .iter()
        .filter(|(_, resource)| resource.resource_type == "AWS::CloudWatch::Alarm")
        .map(|(id, _)| id)
        .collect();
    assert!(alarms.len() >= 5, "{alarms:?}");

    // Then each has a row in docs/operations.md's "Alarms and what to do": what it means, what to do
    let docs =
        std::fs::read_to_string(outbox_tests::workspace_root().join("docs/operations.md")).unwrap();
    let section = &docs[docs
        .find("## Alarms and what to do")
        .expect("an alarms section")..];
    let section = &section[..section[3..].find("\n### ").map_or(section.len(), |i| i + 3)];
    for alarm in alarms {
        assert!(
            section.contains(&format!("| `{alarm}` |")),
            "{alarm} has no row in docs/operations.md, \"Alarms and what to do\""
        );
    }
}

/// `alarm` watches `metric` as the poller emits it: in the template's namespace, with its `Relay`
/// dimension.
fn assert_watches_the_pollers_metric(alarm: &Value, metric: &str) {
    use relay_runtime::metrics::RELAY_DIMENSION;
    assert!(
        is_ref_to(&alarm["Namespace"], "MetricsNamespace"),
        "{alarm}"
    );
    assert_eq!(alarm["MetricName"], metric, "{alarm}");
    assert_eq!(alarm["Dimensions"][0]["Name"], RELAY_DIMENSION, "{alarm}");
    assert_eq!(
        alarm["Dimensions"][0]["Value"],
        relay_poller::poller::ORIGIN,
        "{alarm}"
    );
}

/// The Metrics Insights query of FailedCalls summed over every operation of both relays, in the
/// template's namespace, with `group_by` after it.
fn failed_calls_query(group_by: &str) -> String {
    use relay_runtime::metrics::{FAILED_CALLS, OPERATION_DIMENSION, RELAY_DIMENSION};
    format!(
        "SELECT SUM({FAILED_CALLS}) FROM SCHEMA(\"${{MetricsNamespace}}\", {OPERATION_DIMENSION}, {RELAY_DIMENSION}){group_by}"
    )
}

#[tokio::test]
async fn the_lease_table_a_poller_creates_is_the_templates() {
    // Given the template's lease table and one `relay-poller run --create-lease-table` creates
    use relay_poller::assignment::attr as lease_attr;
    let spec = Template::embedded().unwrap().lease_table().unwrap();
    let env = TestEnv::new().await;
    let name = unique_name("leases");
    relay_poller::assignment::create_lease_table(&env.dynamodb, &name)
        .await
        .unwrap();
    // (a second poller starting at the same time finds it created)
    relay_poller::assignment::create_lease_table(&env.dynamodb, &name)
        .await
        .unwrap();

    // When the emulator describes it
    let (table, ttl) = described(&env, &name).await;

    // Then keys, billing and TTL are the template's, named as the poller names them
    let keys = described_keys(&table);
    assert_eq!(keys, template_keys(&spec.key_schema));
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
    // The single-region stack (the default; a global table's is in `global_table_stacks`)
    let template = Template::embedded().unwrap().with_parameters(&[]).unwrap();

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
    let documents = own_documents(&template, "PollerTaskRole");
    let statements: Vec<&Value> = documents[0]["Statement"]
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
            "dynamodb:DescribeTable",
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
        yaml.contains("HasMaxPublishRate: !Not [!Equals [!Ref MaxPublishRate, \"0\"]]"),
        "the condition"
    );
    assert!(
        template
            .parameter("MaxPublishRate")
            .unwrap()
            .default
            .as_ref()
            .and_then(|d| d.as_str())
            == Some("0"),
        "the parameter's default"
    );
}

/// The documents of `role`'s own policies: its managed policy (`{role}Policy`, attached to it by
/// its `Roles`; Guard's IAM_NO_INLINE_POLICY_CHECK refuses inline ones), and any inline one.
fn own_documents(template: &Template, role: &str) -> Vec<Value> {
    let props = properties(template, role);
    let mut documents: Vec<Value> = props
        .get("Policies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| p["PolicyDocument"].clone())
        .collect();
    let managed = format!("{role}Policy");
    if template.resources.contains_key(&managed) {
        let policy = properties(template, &managed);
        assert!(
            policy["Roles"].to_string().contains(&format!("\"{role}\"")),
            "{managed} is not attached to {role}: {policy}"
        );
        documents.push(policy["PolicyDocument"].clone());
    }
    assert!(!documents.is_empty(), "{role} has no policy of its own");
    documents
}

/// The actions of `role`'s statements, each with its statement's resources as JSON text.
fn role_actions(template: &Template, role: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for document in own_documents(template, role) {
        for statement in document["Statement"].as_array().unwrap() {
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
            reads.iter().all(|r| r.contains("DeadLetterQueue.Arn")),
            "{role}: {reads:?}"
        );
    }
}

/// The template as CloudFormation sees it after the `AWS::Serverless` transform, by the pinned
/// aws-sam-translator (`scripts/sam-transform.sh`, which installs it on first use), once per run.
fn transformed() -> &'static Template {
    static TRANSFORMED: std::sync::OnceLock<Template> = std::sync::OnceLock::new();
    TRANSFORMED.get_or_init(|| {
        let script = outbox_tests::workspace_root().join("scripts/sam-transform.sh");
        let out = std::process::Command::new(&script)
            .output()
            .expect("scripts/sam-transform.sh runs");
        assert!(
            out.status.success(),
            "sam-transform.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8(out.stdout).unwrap();
        Template::parse(&std::fs::read_to_string(path.trim()).unwrap()).unwrap()
    })
}

/// The template as written and as transformed, with a name for messages.
fn both_forms() -> [(&'static str, Template); 2] {
    [
        ("template", Template::embedded().unwrap()),
        ("transformed", transformed().clone()),
    ]
}

/// A permission a role grants: a call of its job (in the code's terms), or one Lambda or ECS
/// makes with the role (the stream mapping's reads, logs, traces), by action and resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Granted {
    Job(String, relay_runtime::permissions::Target),
    Platform(String, &'static str),
}

/// Every action `holder` (a role or a managed policy) grants, on what, read from its statements in
/// either form of the template (`!GetAtt X.Arn` or `{"Fn::GetAtt": ["X", "Arn"]}`).
fn granted(template: &Template, holder: &str) -> BTreeSet<Granted> {
    use relay_runtime::permissions::Target;
    let props = properties(template, holder);
    let mut documents: Vec<Value> = match props.get("PolicyDocument") {
        Some(document) => vec![document.clone()],
        None => own_documents(template, holder),
    };
    documents.extend(attached_policies(template, holder));
    let mut found = BTreeSet::new();
    for document in documents {
        for statement in document["Statement"].as_array().unwrap() {
            assert_eq!(statement["Effect"], "Allow", "{statement}");
            let list = |v: &Value| match v {
                Value::Array(items) => items.clone(),
                one => vec![one.clone()],
            };
            let condition = statement.get("Condition").map(Value::to_string);
            let holds_only = condition
                .as_deref()
                .is_some_and(|c| c.contains("dynamodb:LeadingKeys") && c.contains(r#"["HOLD#*"]"#));
            // A statement that lists attributes is the target whose attributes they are: a status
            // update returns none of them, a read names them (never all attributes)
            let limited = statement
                .pointer("/Condition/ForAllValues:StringEquals/dynamodb:Attributes")
                .map(|attrs| {
                    // A write (a status update, a re-create) returns no attributes; a read names
                    // them: the same attributes are a write's target or a read's by that
                    let writes = statement
                        .pointer("/Condition/StringEqualsIfExists/dynamodb:ReturnValues")
                        .is_some();
                    let target = [
                        Target::OutboxStatus,
                        Target::RecreatedItems,
                        Target::OutboxAttributes,
                        Target::PendingCheck,
                    ]
                    .into_iter()
                    .find(|t| {
                        t.attributes().map(|a| json!(a)).as_ref() == Some(attrs)
                            && writes == matches!(t, Target::OutboxStatus | Target::RecreatedItems)
                    })
                    .unwrap_or_else(|| {
                        panic!("{holder}: attributes no target of the code lists: {statement}")
                    });
                    if writes {
                        assert_eq!(
                            statement
                                .pointer("/Condition/StringEqualsIfExists/dynamodb:ReturnValues"),
                            Some(&json!(["NONE"])),
                            "{holder}: a write returns no attributes: {statement}"
                        );
                    } else {
                        assert_eq!(
                            statement.pointer("/Condition/StringEqualsIfExists/dynamodb:Select"),
                            Some(&json!(target.selects())),
                            "{holder}: a read names its attributes: {statement}"
                        );
                    }
                    target
                });
            for resource in list(&statement["Resource"]) {
                let text = resource.to_string();
                let on = if text.contains("/index/GSI1") {
                    Ok(Target::OutboxIndex)
                } else if text.contains("/stream/") {
                    Err("the table's stream")
                } else if text.contains("OutboxTable") || names_global_table(&text, false) {
                    Ok(match (holds_only, limited) {
                        (true, None) => Target::HoldItems,
                        (false, Some(target)) => target,
                        (false, None) => Target::OutboxTable,
                        (true, Some(_)) => panic!("{holder}: two conditions: {statement}"),
                    })
                } else if text.contains("LeaseTable") || names_global_table(&text, true) {
                    Ok(Target::LeaseTable)
                } else if text.contains("EventTargetKmsKeyArn") {
                    Err("the target's KMS key")
                } else if text.contains("EventBus") || text.contains("EventTarget") {
                    Ok(Target::EventTarget)
                } else if text.contains("DeadLetterQueue") {
                    Ok(Target::DeadLetterQueue)
                } else if text.contains("PayloadBucket") {
                    Ok(payload_bucket_target(holder, &text))
                } else if text.contains("DiscardedBatchBucket") && text.contains("/aws/lambda/*") {
                    Ok(Target::DiscardedBatchObjects)
                } else if text.contains("DiscardedBatchBucket") {
                    Ok(Target::DiscardedBatchBucket)
                } else if text.contains("LogGroup") {
                    Err("its log group")
                } else if text == r#""*""# {
                    Err("*")
                } else {
                    panic!("{holder}: a resource the test does not know: {text}")
                };
                for action in list(&statement["Action"]) {
                    let action = action.as_str().unwrap();
                    found.insert(match on {
                        Ok(target) => Granted::Job(action.to_owned(), target),
                        Err(platform) => Granted::Platform(action.to_owned(), platform),
                    });
                }
            }
        }
    }
    found
}

/// Whether `text` (a resource of a statement) is the ARN of a global table the template names
/// from `GlobalTableName` in the stack's region: the lease table's (`-leases`) or the outbox
/// table's.
fn names_global_table(text: &str, lease: bool) -> bool {
    text.contains(":table/${GlobalTableName}")
        && text.contains("${GlobalTableName}-leases") == lease
}

/// What a resource of the payload bucket (`PayloadBucket`, as `!GetAtt`, `!Sub` or their
/// transformed forms) is in the code's terms: the bucket, its claim-check objects under
/// `outbox_shared::claim_check::KEY_PREFIX`, or its dead letters' records under
/// `relay_runtime::dead_letter::RECORD_PREFIX`. Any other part of it is a grant no job makes.
fn payload_bucket_target(holder: &str, text: &str) -> relay_runtime::permissions::Target {
    use outbox_shared::claim_check::KEY_PREFIX;
    use relay_runtime::dead_letter::RECORD_PREFIX;
    use relay_runtime::permissions::Target;
    if text.contains(&format!("/{KEY_PREFIX}*")) {
        Target::PayloadObjects
    } else if text.contains(&format!("/{RECORD_PREFIX}*")) {
        Target::DeadLetterRecords
    } else if !text.contains('/') {
        Target::PayloadBucket
    } else {
        panic!("{holder}: a part of the payload bucket no job uses: {text}")
    }
}

/// The documents of the `AWS::IAM::Policy` resources attached to `holder` (a role) that
/// CloudFormation creates: each target kind's publish policy. A template not yet decided for
/// its parameters (as written, or as transformed) holds every kind's: those CloudFormation creates
/// at the parameters' defaults are taken.
fn attached_policies(template: &Template, holder: &str) -> Vec<Value> {
    let undecided = ["PublishToBusPolicy", "PublishToTopicPolicy"]
        .iter()
        .all(|id| template.resources.contains_key(*id));
    let at_defaults = Template::embedded()
        .unwrap()
        .with_parameters(&[])
        .unwrap()
        .resources;
    template
        .resources
        .iter()
        .filter(|(id, r)| {
            r.resource_type == "AWS::IAM::Policy" && (!undecided || at_defaults.contains_key(*id))
        })
        .map(|(id, _)| properties(template, id))
        .filter(|policy| {
            policy["Roles"]
                .to_string()
                .contains(&format!("\"{holder}\""))
        })
        .map(|policy| policy["PolicyDocument"].clone())
        .collect()
}

fn jobs(calls: Vec<relay_runtime::permissions::Call>) -> BTreeSet<Granted> {
    calls
        .into_iter()
        .map(|c| Granted::Job(c.action.to_owned(), c.on))
        .collect()
}

fn platform(grants: &[(&str, &'static str)]) -> BTreeSet<Granted> {
    grants
        .iter()
        .map(|(action, on)| Granted::Platform((*action).to_owned(), on))
        .collect()
}

/// What the stream relay's role grants: its calls, and what Lambda does with the role (the
/// mapping's stream reads and its S3 on-failure destination's writes, logs, traces).
fn stream_relay_grants() -> BTreeSet<Granted> {
    let mut expected = jobs(relay_stream::permissions::calls(TargetKind::Classic));
    expected.extend(jobs(
        relay_stream::permissions::ON_FAILURE_DESTINATION.to_vec(),
    ));
    expected.extend(platform(&[
        ("logs:CreateLogStream", "its log group"),
        ("logs:PutLogEvents", "its log group"),
        ("dynamodb:DescribeStream", "the table's stream"),
        ("dynamodb:GetRecords", "the table's stream"),
        ("dynamodb:GetShardIterator", "the table's stream"),
        ("dynamodb:ListStreams", "the table's stream"),
        ("xray:PutTraceSegments", "*"),
        ("xray:PutTelemetryRecords", "*"),
    ]));
    expected
}

#[test]
fn each_role_grants_exactly_the_calls_its_job_makes_as_written_and_as_transformed() {
    for (form, template) in both_forms() {
        // The stream relay's role: its calls, and what Lambda does with the role (the mapping's
        // stream reads and its S3 on-failure destination's writes, logs, traces)
        assert_eq!(
            granted(&template, "RelayFunctionRole"),
            stream_relay_grants(),
            "{form}: RelayFunctionRole"
        );

        // The always-on poller service: what `run` (and a `drain` on its task definition) calls
        assert_eq!(
            granted(&template, "PollerTaskRole"),
            jobs(relay_poller::permissions::service(TargetKind::Classic)),
            "{form}: PollerTaskRole"
        );
        // And nothing an operator command alone needs: no reads or scans of the table, no
        // receiving or deleting dead letters (it puts whole items only to re-create the TTL-deleted
        // events of discarded stream batches, which it recovers unattended)
        let service = granted(&template, "PollerTaskRole");
        for action in [
            "dynamodb:GetItem",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
        ] {
            assert!(
                !service.iter().any(|g| matches!(g, Granted::Job(a, on)
                    if a == action && *on != relay_runtime::permissions::Target::LeaseTable)),
                "{form}: the service may {action}"
            );
        }

        // The operator commands' role, on a task definition of their own
        assert_eq!(
            granted(&template, "OperatorTaskRole"),
            jobs(relay_poller::permissions::operator(TargetKind::Classic)),
            "{form}: OperatorTaskRole"
        );
        let task = properties(&template, "OperatorTaskDefinition");
        assert!(task["TaskRoleArn"].to_string().contains("OperatorTaskRole"));
        let service_task = properties(&template, "PollerTaskDefinition");
        assert!(
            service_task["TaskRoleArn"]
                .to_string()
                .contains("PollerTaskRole")
        );
        assert_eq!(
            task["ContainerDefinitions"][0]["Image"],
            service_task["ContainerDefinitions"][0]["Image"]
        );
    }
}

/// IAM actions that read items of a table (`TransactGetItems` is authorized as `GetItem`, a
/// PartiQL `SELECT` as `PartiQLSelect`).
const ITEM_READS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:PartiQLSelect",
];

/// Statements that may read the outbox table's items unconditioned, each with why: the order
/// service's own policy reads the orders it writes (their `Version`, an idempotent create's
/// record): the data is its own.
const UNCONDITIONED_READERS: &[(&str, &str)] = &[("OrderServiceWriterPolicy", "ReadOrders")];

#[test]
fn every_read_of_the_outbox_table_is_of_outbox_items_or_of_their_attributes_only() {
    use outbox_shared::schema::OUTBOX_ATTRIBUTES;
    use relay_runtime::permissions::{SELECT_COUNT, SELECT_SPECIFIC};
    for (form, template) in both_forms() {
        let mut reads = 0;
        for (holder, resource) in &template.resources {
            let props = serde_json::to_value(&resource.properties).unwrap();
            let documents: Vec<Value> = match resource.resource_type.as_str() {
                "AWS::IAM::Role" => props["Policies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| p["PolicyDocument"].clone())
                    .collect(),
                "AWS::IAM::ManagedPolicy" | "AWS::IAM::Policy" => {
                    vec![props["PolicyDocument"].clone()]
                }
                _ => continue,
            };
            for statement in documents
                .iter()
                .flat_map(|d| d["Statement"].as_array().cloned().unwrap_or_default())
            {
                let list = |v: &Value| match v {
                    Value::Array(items) => items.clone(),
                    one => vec![one.clone()],
                };
                // A statement on the table itself (not only its index or its stream) that grants
                // a read of items, or any action by a wildcard
                let on_table = list(&statement["Resource"]).iter().any(|r| {
                    let r = r.to_string();
                    (r.contains("OutboxTable") && !r.contains("/index/") && !r.contains("/stream/"))
                        || r == r#""*""#
                });
                // An action chosen by a condition (`!If`) is read as every branch's
                let reads_items = list(&statement["Action"]).iter().any(|a| match a.as_str() {
                    Some(a) => {
                        ITEM_READS.contains(&a) || (a.starts_with("dynamodb:") && a.contains('*'))
                    }
                    None => a.to_string().contains("dynamodb:"),
                });
                if !(on_table && reads_items) {
                    continue;
                }
                reads += 1;
                let sid = statement["Sid"].as_str().unwrap_or("(no Sid)");
                if UNCONDITIONED_READERS.contains(&(holder.as_str(), sid)) {
                    continue;
                }

                // Then it reads hold items only (their keys begin HOLD#: no order's and no event's)
                let leading =
                    statement.pointer("/Condition/ForAllValues:StringLike/dynamodb:LeadingKeys");
                if leading.is_some() {
                    assert_eq!(leading, Some(&json!(["HOLD#*"])), "{form} {holder}.{sid}");
                    continue;
                }

                // Or it reads outbox attributes only, each read naming them (a projection) or
                // counting: never all of an item's attributes
                let attributes = statement
                    .pointer("/Condition/ForAllValues:StringEquals/dynamodb:Attributes")
                    .and_then(Value::as_array)
                    .unwrap_or_else(|| {
                        panic!(
                            "{form} {holder}.{sid} reads the table unconditioned (any order's \
                             attributes): {statement}"
                        )
                    });
                for attribute in attributes {
                    let attribute = attribute.as_str().unwrap();
                    assert!(
                        OUTBOX_ATTRIBUTES.contains(&attribute),
                        "{form} {holder}.{sid} may read {attribute}, no outbox attribute"
                    );
                }
                let selects = statement
                    .pointer("/Condition/StringEqualsIfExists/dynamodb:Select")
                    .or_else(|| statement.pointer("/Condition/StringEquals/dynamodb:Select"))
                    .and_then(Value::as_array)
                    .unwrap_or_else(|| {
                        panic!(
                            "{form} {holder}.{sid} lets a read without a projection read whole \
                             items (no dynamodb:Select): {statement}"
                        )
                    });
                for select in selects {
                    assert!(
                        [json!(SELECT_SPECIFIC), json!(SELECT_COUNT)].contains(select),
                        "{form} {holder}.{sid} allows Select {select}"
                    );
                }
            }
        }
        // The statements above are the operator's, the poller's, the stream relay's and the
        // order service's
        assert!(reads >= 4, "{form}: {reads} statements read the table");
    }
}

#[test]
fn the_order_services_policy_grants_what_the_writer_calls_on_the_table_and_is_exported() {
    use relay_runtime::permissions::Target;
    let template = Template::embedded().unwrap();

    // The managed policy grants the writer's actions on the outbox table and on the payload
    // bucket's payloads/ (the conditional PutObject of a payload larger than an item, and the
    // HeadObject of an object already under its key, the calls relay_runtime::claim_check lists
    // for the relays), nothing more
    let mut expected: BTreeSet<Granted> = outbox_writer::TABLE_ACTIONS
        .iter()
        .map(|action| Granted::Job((*action).to_owned(), Target::OutboxTable))
        .collect();
    expected.extend(
        outbox_writer::PAYLOAD_OBJECT_ACTIONS
            .iter()
            .map(|action| Granted::Job((*action).to_owned(), Target::PayloadObjects)),
    );

    let writer = granted(&template, "OrderServiceWriterPolicy");
    assert_eq!(writer, expected);
    assert!(writer.contains(&Granted::Job(
        "s3:PutObject".to_owned(),
        Target::PayloadObjects
    )));
    // (and nothing on the dead letters' records, nor any read of the bucket)
    assert!(
        !writer.iter().any(|g| matches!(
            g,
            Granted::Job(_, Target::DeadLetterRecords | Target::PayloadBucket)
        )),
        "{writer:?}"
    );
    assert_eq!(
        template
            .resource("OrderServiceWriterPolicy")
            .unwrap()
            .resource_type,
        "AWS::IAM::ManagedPolicy"
    );

    // And its ARN is a stack output, exported for the order service's stack
    let yaml = outbox_infra::TEMPLATE_YAML;
    let output = &yaml[yaml
        .find("  OrderServiceWriterPolicyArn:")
        .expect("the output")..];
    let output = &output[..output.find("\n  ConsumerIdempotencyTableName:").unwrap()];
    assert!(
        output.contains("Value: !Ref OrderServiceWriterPolicy"),
        "{output}"
    );
    assert!(
        output.contains(r#"Name: !Sub "${AWS::StackName}-OrderServiceWriterPolicyArn""#),
        "{output}"
    );
}

#[tokio::test]
async fn the_consumers_idempotency_table_is_optional_and_the_one_the_consumer_crate_creates() {
    use outbox_consumer::tables::idempotency::attr as idem;
    let template = Template::embedded().unwrap();

    // Given the template's idempotency table, created only when asked for
    let spec = template.consumer_idempotency_table().unwrap();
    let yaml = outbox_infra::TEMPLATE_YAML;
    let declared = &yaml[yaml.find("  ConsumerIdempotencyTable:\n").unwrap()..];
    assert!(
        declared
            .lines()
            .take(3)
            .any(|l| l.trim() == "Condition: CreatesConsumerIdempotencyTable"),
        "{declared}"
    );
    assert!(yaml.contains(
        "CreatesConsumerIdempotencyTable: !Equals [!Ref CreateConsumerIdempotencyTable, \"true\"]"
    ));
    let parameter = template
        .parameter("CreateConsumerIdempotencyTable")
        .unwrap();
    assert_eq!(
        parameter.default.as_ref().and_then(|d| d.as_str()),
        Some("false")
    );

    // And one the consumer crate creates on the emulator
    let env = TestEnv::new().await;
    let name = unique_name("idempotency");
    outbox_consumer::tables::create_idempotency_table(&env.dynamodb, &name)
        .await
        .unwrap();

    // When the emulator describes it
    let (table, ttl) = described(&env, &name).await;

    // Then keys, attribute types, billing and TTL are the template's, named as the crate names them
    let keys = described_keys(&table);
    assert_eq!(keys, template_keys(&spec.key_schema));
    assert_eq!(keys, pairs([(idem::PK, "HASH")]));
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
    assert_eq!(template_ttl.attribute_name, idem::TTL);
    assert_eq!(ttl.attribute_name(), Some(idem::TTL));
    assert!(spec.stream_specification.is_none());
}

#[test]
fn the_stream_mapping_reaches_lambda_as_written_after_the_transform() {
    // Given the template as CloudFormation sees it after the SAM transform
    let written = Template::embedded().unwrap();
    let transformed = transformed();

    // Then the function is a plain Lambda function on the template's runtime and architecture
    let function = properties(transformed, "RelayFunction");
    assert_eq!(
        transformed.resource("RelayFunction").unwrap().resource_type,
        "AWS::Lambda::Function"
    );
    assert_eq!(function["Runtime"], "provided.al2023");
    assert_eq!(function["Architectures"], json!(["arm64"]));
    assert_eq!(function["Handler"], "bootstrap");
    assert_eq!(
        function["Environment"]["Variables"]["HOLD_FAILED_AGGREGATES"],
        "true"
    );

    // And the mapping Lambda receives has the template's filter, batch settings and destination
    assert_eq!(
        transformed.stream_filter_patterns().unwrap(),
        written.stream_filter_patterns().unwrap()
    );
    let mapping = properties(transformed, "RelayEventSourceMapping");
    assert_eq!(
        transformed
            .resource("RelayEventSourceMapping")
            .unwrap()
            .resource_type,
        "AWS::Lambda::EventSourceMapping"
    );
    assert_eq!(mapping["FunctionName"], json!({"Ref": "RelayFunction"}));
    // (the single-region table's stream; a global table's replica's, created by this stack or
    // named by GlobalTableStreamArn)
    assert_eq!(
        mapping["EventSourceArn"],
        json!({"Fn::If": ["ReadsGlobalTableStream", {"Ref": "GlobalTableStreamArn"},
            {"Fn::If": ["CreatesGlobalTables", {"Fn::GetAtt": ["OutboxGlobalTable", "StreamArn"]},
                {"Fn::GetAtt": ["OutboxTable", "StreamArn"]}]}]})
    );
    assert_eq!(mapping["BatchSize"], json!({"Ref": "StreamBatchSize"}));
    assert_eq!(mapping["MaximumBatchingWindowInSeconds"], 1);
    assert_eq!(
        mapping["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(mapping["BisectBatchOnFunctionError"], true);
    assert_eq!(mapping["StartingPosition"], "TRIM_HORIZON");
    assert_eq!(
        mapping["MaximumRetryAttempts"],
        json!({"Ref": "StreamMaxRetryAttempts"})
    );
    assert_eq!(
        mapping["MaximumRecordAgeInSeconds"],
        json!({"Ref": "StreamMaxRecordAgeSeconds"})
    );
    assert_eq!(
        mapping["DestinationConfig"]["OnFailure"]["Destination"],
        json!({"Fn::GetAtt": ["DiscardedBatchBucket", "Arn"]})
    );
}

#[tokio::test]
async fn discarded_batches_go_whole_to_a_private_tls_only_bucket_that_keeps_what_is_not_recovered()
{
    use outbox_infra::template::logical_id::DISCARDED_BATCH_BUCKET;
    use relay_runtime::metrics::DISCARDED_BATCHES_LEFT;
    let template = Template::embedded().unwrap();
    let yaml = outbox_infra::TEMPLATE_YAML;

    // The mapping discards to the bucket (an S3 destination gets the whole batch)
    let mapping = properties(&template, "RelayEventSourceMapping");
    assert_eq!(
        mapping["DestinationConfig"]["OnFailure"]["Destination"]["!GetAtt"],
        "DiscardedBatchBucket.Arn"
    );

    // The bucket is encrypted with SSE-S3, owned by its account, and kept with the stack (that
    // its public access is blocked and it is versioned is checkov's to check in `make check`:
    // CKV_AWS_53 to CKV_AWS_56, CKV_AWS_21)
    let bucket = properties(&template, DISCARDED_BATCH_BUCKET);
    // (SSE-S3 at the parameters' defaults; the stack's KMS key with Hardened)
    for (hardened, algorithm) in [("false", "AES256"), ("true", "aws:kms")] {
        let decided = Template::embedded()
            .unwrap()
            .with_parameters(&[("Hardened", hardened)])
            .unwrap();
        let encryption = &properties(&decided, DISCARDED_BATCH_BUCKET)["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            [0];
        assert_eq!(
            encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"],
            algorithm
        );
        assert_eq!(
            encryption["ServerSideEncryptionByDefault"]
                .get("KMSMasterKeyID")
                .is_some(),
            hardened == "true",
            "{encryption}"
        );
    }
    assert_eq!(
        bucket["OwnershipControls"]["Rules"][0]["ObjectOwnership"],
        "BucketOwnerEnforced"
    );
    let declared = &yaml[yaml.find("  DiscardedBatchBucket:\n").unwrap()..];
    assert!(
        declared
            .lines()
            .take(3)
            .any(|l| l.trim() == "DeletionPolicy: Retain"),
        "{declared}"
    );

    // And its lifecycle never expires a batch not yet recovered (an event's only copy may be in
    // it): only recovered (deleted, noncurrent) ones, after the logs that name them
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_array()
        .unwrap();
    assert!(!rules.is_empty());
    for rule in rules {
        assert!(rule.get("ExpirationInDays").is_none(), "{rule}");
        assert!(rule.get("ExpirationDate").is_none(), "{rule}");
        assert!(rule.get("Transitions").is_none(), "{rule}");
    }
    let recovered = rules
        .iter()
        .find(|r| r.get("NoncurrentVersionExpiration").is_some())
        .expect("a rule for recovered batches");
    assert!(is_ref_to(
        &recovered["NoncurrentVersionExpiration"]["NoncurrentDays"],
        "LogRetentionDays"
    ));
    assert_eq!(recovered["Status"], "Enabled");

    // Every request to it is in the server access logs (Guard's S3_BUCKET_LOGGING_ENABLED)
    let logging = &properties(&template, DISCARDED_BATCH_BUCKET)["LoggingConfiguration"];
    assert_eq!(logging["DestinationBucketName"]["!Ref"], "AccessLogBucket");
    assert_eq!(logging["LogFilePrefix"], "discarded-batches/");

    // And its policy refuses every request not over TLS, on the bucket and its objects
    let policy = properties(&template, "DiscardedBatchBucketPolicy");
    assert_eq!(policy["Bucket"]["!Ref"], DISCARDED_BATCH_BUCKET);
    let statements = policy["PolicyDocument"]["Statement"].as_array().unwrap();
    let tls = statements
        .iter()
        .find(|s| s["Condition"]["Bool"]["aws:SecureTransport"] == false)
        .expect("a TLS-only statement");
    assert_eq!(tls["Effect"], "Deny");
    assert_eq!(tls["Principal"], "*");
    assert_eq!(tls["Action"], "s3:*");
    let resources = tls["Resource"].to_string();
    assert!(
        resources.contains("DiscardedBatchBucket.Arn"),
        "{resources}"
    );
    assert!(
        resources.contains("${DiscardedBatchBucket.Arn}/*"),
        "{resources}"
    );

    // And both poller task definitions read it, and an alarm watches the batches they cannot
    // recover, with the metric and dimension the poller emits
    for task in ["PollerTaskDefinition", "OperatorTaskDefinition"] {
        let env = properties(&template, task)["ContainerDefinitions"][0]["Environment"].clone();
        let bucket_var = env
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["Name"] == "DISCARDED_BATCH_BUCKET")
            .unwrap_or_else(|| panic!("{task} sets DISCARDED_BATCH_BUCKET"))
            .clone();
        assert!(
            is_ref_to(&bucket_var["Value"], DISCARDED_BATCH_BUCKET),
            "{task}"
        );
    }
    let alarm = properties(&template, "DiscardedBatchesLeftAlarm");
    assert_watches_the_pollers_metric(&alarm, DISCARDED_BATCHES_LEFT);
    assert!(documented_metrics().contains(DISCARDED_BATCHES_LEFT));

    // And the bucket local provisioning creates is the template's
    let env = TestEnv::new().await;
    let name = env.create_discarded_batch_bucket().await;
    assert_local_bucket_is_the_templates(
        &env,
        &name,
        "aws/lambda/esm/shard/2026/11/22/2026-11-22T10.00.00-x",
    )
    .await;
}

/// The bucket `name` that local provisioning created on the emulator is as the template makes
/// it: versioned (an object `key` put then deleted stays as a noncurrent version; moto answers
/// GetBucketVersioning under a root element the SDK refuses, so it is observed as an operator
/// would see it), encrypted with SSE-S3, and with all public access blocked. (Its TLS-only policy
/// and lifecycle are AWS's to enforce: the emulator serves plain HTTP and runs no lifecycle.)
async fn assert_local_bucket_is_the_templates(env: &TestEnv, name: &str, key: &str) {
    env.s3
        .put_object()
        .bucket(name)
        .key(key)
        .body(b"{}".to_vec().into())
        .send()
        .await
        .unwrap();
    env.s3
        .delete_object()
        .bucket(name)
        .key(key)
        .send()
        .await
        .unwrap();
    let versions = env
        .s3
        .list_object_versions()
        .bucket(name)
        .send()
        .await
        .unwrap();
    assert_eq!(versions.versions().len(), 1, "{versions:?}");
    assert_eq!(versions.delete_markers().len(), 1, "{versions:?}");
    let encryption = env
        .s3
        .get_bucket_encryption()
        .bucket(name)
        .send()
        .await
        .unwrap();
    let algorithm = encryption
        .server_side_encryption_configuration()
        .and_then(|c| c.rules().first())
        .and_then(|r| r.apply_server_side_encryption_by_default())
        .map(|d| d.sse_algorithm().as_str().to_owned());
    assert_eq!(algorithm.as_deref(), Some("AES256"));
    let block = env
        .s3
        .get_public_access_block()
        .bucket(name)
        .send()
        .await
        .unwrap();
    let block = block.public_access_block_configuration().unwrap();
    assert_eq!(
        [
            block.block_public_acls(),
            block.block_public_policy(),
            block.ignore_public_acls(),
            block.restrict_public_buckets()
        ],
        [Some(true); 4]
    );
}

/// The lines of output `name` in the template as written, up to the next output.
fn output_text(name: &str) -> String {
    let yaml = outbox_infra::TEMPLATE_YAML;
    let outputs = &yaml[yaml.find("\nOutputs:\n").expect("the outputs")..];
    let start = outputs
        .find(&format!("\n  {name}:\n"))
        .unwrap_or_else(|| panic!("no output {name}"));
    let mut lines = outputs[start + 1..].lines();
    let first = lines.next().unwrap();
    std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("    ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_payload_bucket_is_private_encrypted_tls_only_and_expires_what_it_holds() {
    use outbox_infra::template::logical_id::PAYLOAD_BUCKET;
    use outbox_shared::claim_check::KEY_PREFIX;
    use relay_runtime::dead_letter::RECORD_PREFIX;
    let template = Template::embedded().unwrap();
    let yaml = outbox_infra::TEMPLATE_YAML;

    // The bucket is encrypted with SSE-S3 (no key grant for a writer, a relay or a consumer),
    // owned by its account, and kept with the stack (events in flight name it); that its public
    // access is blocked and it is versioned is checkov's to check in `make check` (CKV_AWS_53 to
    // CKV_AWS_56, CKV_AWS_21)
    let bucket = properties(&template, PAYLOAD_BUCKET);
    assert_eq!(
        template.resource(PAYLOAD_BUCKET).unwrap().resource_type,
        "AWS::S3::Bucket"
    );
    // (SSE-S3 at the parameters' defaults; the stack's KMS key with Hardened)
    for (hardened, algorithm) in [("false", "AES256"), ("true", "aws:kms")] {
        let decided = Template::embedded()
            .unwrap()
            .with_parameters(&[("Hardened", hardened)])
            .unwrap();
        let encryption = &properties(&decided, PAYLOAD_BUCKET)["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            [0];
        assert_eq!(
            encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"],
            algorithm
        );
        assert_eq!(
            encryption["ServerSideEncryptionByDefault"]
                .get("KMSMasterKeyID")
                .is_some(),
            hardened == "true",
            "{encryption}"
        );
    }
    assert_eq!(
        bucket["OwnershipControls"]["Rules"][0]["ObjectOwnership"],
        "BucketOwnerEnforced"
    );
    let declared = &yaml[yaml.find("  PayloadBucket:\n").unwrap()..];
    assert!(
        declared
            .lines()
            .take(4)
            .any(|l| l.trim() == "DeletionPolicy: Retain"),
        "{declared}"
    );

    // And its lifecycle expires what is under each prefix the code writes (the claim check's
    // payloads, the dead letters' records) PayloadRetentionDays after it was stored
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_array()
        .unwrap();
    for prefix in [KEY_PREFIX, RECORD_PREFIX] {
        let rule = rules
            .iter()
            .find(|r| r["Prefix"] == prefix)
            .unwrap_or_else(|| panic!("no lifecycle rule for {prefix}: {rules:?}"));
        assert_eq!(rule["Status"], "Enabled", "{rule}");
        assert!(
            is_ref_to(&rule["ExpirationInDays"], "PayloadRetentionDays"),
            "{rule}"
        );
    }
    // (and nothing sooner, elsewhere, or by moving objects to another storage class)
    for rule in rules {
        assert!(rule.get("ExpirationDate").is_none(), "{rule}");
        assert!(rule.get("Transitions").is_none(), "{rule}");
        if let Some(days) = rule.get("ExpirationInDays") {
            assert!(is_ref_to(days, "PayloadRetentionDays"), "{rule}");
            assert!(
                [KEY_PREFIX, RECORD_PREFIX]
                    .iter()
                    .any(|p| rule["Prefix"] == *p),
                "{rule}"
            );
        }
    }
    // And an expired object's noncurrent version goes a day on, then its delete marker, and an
    // upload never completed goes too, anywhere in the bucket
    let cleanup = rules
        .iter()
        .find(|r| r.get("NoncurrentVersionExpiration").is_some())
        .expect("a rule for noncurrent versions");
    assert!(cleanup.get("Prefix").is_none(), "{cleanup}");
    assert_eq!(cleanup["Status"], "Enabled");
    assert_eq!(cleanup["NoncurrentVersionExpiration"]["NoncurrentDays"], 1);
    assert_eq!(cleanup["ExpiredObjectDeleteMarker"], true);
    assert_eq!(
        cleanup["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"],
        1
    );

    // Every request to it is in the server access logs (Guard's S3_BUCKET_LOGGING_ENABLED)
    assert_eq!(
        bucket["LoggingConfiguration"]["DestinationBucketName"]["!Ref"],
        "AccessLogBucket"
    );
    assert_eq!(bucket["LoggingConfiguration"]["LogFilePrefix"], "payloads/");

    // And its policy refuses every request not over TLS, on the bucket and its objects
    let policy = properties(&template, "PayloadBucketPolicy");
    assert_eq!(policy["Bucket"]["!Ref"], PAYLOAD_BUCKET);
    let statements = policy["PolicyDocument"]["Statement"].as_array().unwrap();
    let tls = statements
        .iter()
        .find(|s| s["Condition"]["Bool"]["aws:SecureTransport"] == false)
        .expect("a TLS-only statement");
    assert_eq!(tls["Effect"], "Deny");
    assert_eq!(tls["Principal"], "*");
    assert_eq!(tls["Action"], "s3:*");
    let resources = tls["Resource"].to_string();
    assert!(resources.contains("PayloadBucket.Arn"), "{resources}");
    assert!(resources.contains("${PayloadBucket.Arn}/*"), "{resources}");

    // And the stream relay and both poller task definitions are given it (PAYLOAD_BUCKET), and
    // its name is an output
    let lambda = properties(&template, "RelayFunction");
    let variable = &lambda["Environment"]["Variables"]["PAYLOAD_BUCKET"];
    assert!(is_ref_to(variable, PAYLOAD_BUCKET), "{variable}");
    for task in ["PollerTaskDefinition", "OperatorTaskDefinition"] {
        let env = properties(&template, task)["ContainerDefinitions"][0]["Environment"].clone();
        let variable = env
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["Name"] == "PAYLOAD_BUCKET")
            .unwrap_or_else(|| panic!("{task} sets PAYLOAD_BUCKET"))
            .clone();
        assert!(is_ref_to(&variable["Value"], PAYLOAD_BUCKET), "{task}");
    }
    let output = output_text("PayloadBucketName");
    assert!(output.contains("Value: !Ref PayloadBucket"), "{output}");

    // And the bucket local provisioning creates is the template's
    let env = TestEnv::new().await;
    let name = env.create_payload_bucket().await;
    assert_local_bucket_is_the_templates(&env, &name, &format!("{KEY_PREFIX}e-1")).await;
}

#[test]
fn payloads_outlive_every_copy_of_their_event_a_consumer_may_still_read() {
    use relay_runtime::status_store::TtlPolicy;
    use std::time::Duration;
    const DAY: Duration = Duration::from_secs(24 * 60 * 60);
    // How long EventBridge retries delivering an event to a target (its default, 24 hours).
    const EVENTBRIDGE_RETRIES: Duration = DAY;
    // SQS's longest MessageRetentionPeriod (1,209,600 s): a consumer queue's, its dead-letter
    // queue's.
    const SQS_MAX_RETENTION: Duration = Duration::from_secs(14 * 24 * 60 * 60);
    let template = Template::embedded().unwrap();
    // A number of days as the template writes it: 45, or "7d"
    let days = |value: Option<&_>| -> Duration {
        let text = match serde_json::to_value(value.expect("a value")).unwrap() {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.trim_end_matches('d').to_owned(),
            other => panic!("not a number of days: {other}"),
        };
        DAY * text.parse::<u32>().unwrap()
    };
    let parameter = template.parameter("PayloadRetentionDays").unwrap();
    assert_eq!(parameter.parameter_type, "Number");
    let retention = days(parameter.default.as_ref());
    let shortest = days(parameter.min_value.as_ref());

    // Given the longest an event may wait in the outbox for its last publish at the template's
    // defaults: pending, up to the outbox retention (TtlRetention); dead-lettered, as long as its
    // item stays for a redrive
    let ttl_retention = days(template.parameter("TtlRetention").unwrap().default.as_ref());
    let in_outbox = ttl_retention.max(TtlPolicy::new(ttl_retention).dead_lettered);

    // Then a payload stored when its event was written outlives that, EventBridge's retries, and
    // a consumer queue's retention and its dead-letter queue's (a redrive of either included)
    let needed = in_outbox + EVENTBRIDGE_RETRIES + SQS_MAX_RETENTION + SQS_MAX_RETENTION;
    assert!(
        retention >= needed,
        "PayloadRetentionDays {} days < {} days",
        retention.as_secs() / DAY.as_secs(),
        needed.as_secs() / DAY.as_secs()
    );

    // And even the shortest retention allowed keeps what the stack's own redrive needs: a dead
    // letter's record outlives its letter in DeadLetterQueue, and a dead-lettered item (at the
    // shortest TtlRetention, 2d) finds its payload for as long as it stays
    let queue_retention = template
        .scalar_properties("DeadLetterQueue")
        .unwrap()
        .remove("MessageRetentionPeriod")
        .unwrap();
    let queue_retention = Duration::from_secs(queue_retention.parse().unwrap());
    assert!(
        shortest > queue_retention,
        "{shortest:?} {queue_retention:?}"
    );
    assert!(shortest >= TtlPolicy::new(DAY * 2).dead_lettered);

    // And the parameter's description states the rule, and that orphans need nothing else
    let description = parameter.description.as_deref().unwrap();
    for part in [
        "TtlRetention",
        "EventBridge's retries",
        "14 days",
        "dead-letters/",
        "orphans",
        "ArchiveRetentionDays",
    ] {
        assert!(description.contains(part), "{part}: {description}");
    }
}

#[test]
fn the_consumers_policy_reads_payloads_only_and_is_exported() {
    use relay_runtime::permissions::Target;
    let template = Template::embedded().unwrap();

    // The consumers' managed policy reads the claim check's payloads (GetObject under payloads/),
    // and may list the bucket, without which S3 answers a missing key with 403 instead of 404 and
    // a payload past its retention could not be told from a permission missing; it writes
    // nothing and reads no dead letter's record
    assert_eq!(
        template
            .resource("PayloadConsumerPolicy")
            .unwrap()
            .resource_type,
        "AWS::IAM::ManagedPolicy"
    );
    for (form, template) in both_forms() {
        assert_eq!(
            granted(&template, "PayloadConsumerPolicy"),
            BTreeSet::from([
                Granted::Job("s3:GetObject".to_owned(), Target::PayloadObjects),
                Granted::Job("s3:ListBucket".to_owned(), Target::PayloadBucket),
            ]),
            "{form}"
        );
    }

    // And its ARN is a stack output, exported for the consumers' stacks
    let output = output_text("PayloadConsumerPolicyArn");
    assert!(
        output.contains("Value: !Ref PayloadConsumerPolicy"),
        "{output}"
    );
    assert!(
        output.contains(r#"Name: !Sub "${AWS::StackName}-PayloadConsumerPolicyArn""#),
        "{output}"
    );
}

/// The template's parameters that reach a relay, each with the relays' flag that reads it.
const RELAY_PARAMETERS: &[(&str, &str)] = &[
    ("EventBusName", "--event-bus-name"),
    ("EventSource", "--source"),
    ("ShardCount", "--shard-count"),
    ("TtlRetention", "--ttl-retention"),
    ("GracePeriod", "--grace-period"),
    ("MaxPublishRate", "--max-publish-rate"),
    ("MetricsNamespace", "--metrics-namespace"),
];

/// The relays' flags for `values` (parameter to value), as the template sets their variables:
/// `MAX_PUBLISH_RATE` only when `MaxPublishRate` is not 0.
fn relay_flags(values: &BTreeMap<&str, String>, only: &[&str]) -> Vec<String> {
    let mut flags = Vec::new();
    for (parameter, flag) in RELAY_PARAMETERS {
        if !only.contains(parameter) {
            continue;
        }
        let value = &values[parameter];
        if *parameter == "MaxPublishRate" && value == "0" {
            continue;
        }
        flags.extend([(*flag).to_owned(), value.clone()]);
    }
    flags
}

/// Whether the poller's `run` (its own parser and validation) takes `values`.
fn poller_takes(values: &BTreeMap<&str, String>) -> Result<(), String> {
    use clap::Parser;
    let mut args: Vec<String> = [
        "relay-poller",
        "run",
        "--table-name",
        "outbox",
        "--dead-letter-queue-url",
        "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(relay_flags(
        values,
        &[
            "EventBusName",
            "EventSource",
            "ShardCount",
            "TtlRetention",
            "GracePeriod",
            "MaxPublishRate",
            "MetricsNamespace",
        ],
    ));
    let cli = relay_poller::Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    let relay_poller::Command::Run(run) = cli.command else {
        unreachable!("run")
    };
    run.relay.validate().map(|_| ()).map_err(|e| e.to_string())
}

/// Whether the stream relay's parser and validation (the Lambda's, from the same variables) take
/// `values`.
fn stream_relay_takes(values: &BTreeMap<&str, String>) -> Result<(), String> {
    use clap::Parser;
    #[derive(Debug, clap::Parser)]
    struct Lambda {
        #[command(flatten)]
        relay: relay_stream::RelayArgs,
        #[command(flatten)]
        metrics: relay_runtime::metrics::MetricsArgs,
    }
    let mut args: Vec<String> = ["relay-stream", "--table-name", "outbox"]
        .map(str::to_owned)
        .to_vec();
    args.extend(relay_flags(
        values,
        &[
            "EventBusName",
            "EventSource",
            "TtlRetention",
            "MaxPublishRate",
            "MetricsNamespace",
        ],
    ));
    let lambda = Lambda::try_parse_from(args).map_err(|e| e.to_string())?;
    lambda.relay.publisher_config().map_err(|e| e.to_string())?;
    lambda
        .relay
        .retention
        .ttl_policy()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn every_value_a_relay_parameter_allows_is_one_both_relays_take_and_bad_ones_are_refused() {
    let template = Template::embedded().unwrap();
    let pattern = |parameter: &str| {
        let declared = template.parameter(parameter).unwrap();
        assert_eq!(declared.parameter_type, "String", "{parameter}");
        let pattern = declared
            .allowed_pattern
            .as_deref()
            .unwrap_or_else(|| panic!("{parameter} has no AllowedPattern"));
        // CloudFormation matches the whole value; these patterns are anchored, as Rust's regex
        // and Java's agree on them.
        assert!(
            pattern.starts_with('^') && pattern.ends_with('$'),
            "{pattern}"
        );
        regex::Regex::new(pattern).unwrap()
    };
    let defaults: BTreeMap<&str, String> = RELAY_PARAMETERS
        .iter()
        .map(|(p, _)| {
            let default = template.parameter(p).unwrap().default.as_ref();
            let default = default.and_then(|d| d.as_str()).unwrap_or_else(|| {
                panic!("{p} has a string default");
            });
            (*p, default.to_owned())
        })
        .collect();
    let long = |n: usize| "a".repeat(n);

    // (parameter, value, whether the pattern takes it, whether a relay refuses it)
    let cases: Vec<(&str, String, bool, bool)> = vec![
        ("EventBusName", "orders".into(), true, false),
        ("EventBusName", long(256), true, false),
        // The relays take an ARN of up to 1600 characters; the stack creates the bus by name,
        // which CreateEventBus takes up to 256
        ("EventBusName", long(257), false, false),
        ("EventBusName", String::new(), false, true),
        ("EventBusName", "two words".into(), false, true),
        ("EventBusName", "orders:bus".into(), false, true),
        ("EventSource", "com.example.orders".into(), true, false),
        ("EventSource", long(256), true, false),
        ("EventSource", String::new(), false, true),
        ("EventSource", long(257), false, false),
        ("EventSource", "aws.orders".into(), false, true),
        ("EventSource", "aws.".into(), false, true),
        ("EventSource", "aws".into(), true, false),
        ("EventSource", "a".into(), true, false),
        ("EventSource", "aws-orders".into(), true, false),
        ("EventSource", "awsome.orders".into(), true, false),
        ("EventSource", "aw.s".into(), true, false),
        ("EventSource", "AWS.orders".into(), true, false),
        ("EventSource", format!("aws_{}", long(252)), true, false),
        ("EventSource", format!("b{}", long(255)), true, false),
        ("EventSource", "two words".into(), false, false),
        ("ShardCount", "1".into(), true, false),
        ("ShardCount", "16".into(), true, false),
        ("ShardCount", "999".into(), true, false),
        ("ShardCount", "1000".into(), true, false),
        ("ShardCount", "1019".into(), true, false),
        ("ShardCount", "1024".into(), true, false),
        ("ShardCount", "0".into(), false, true),
        ("ShardCount", "1025".into(), false, true),
        ("ShardCount", "2.5".into(), false, true),
        ("ShardCount", "-1".into(), false, true),
        ("ShardCount", "65536".into(), false, true),
        ("TtlRetention", "2d".into(), true, false),
        ("TtlRetention", "7d".into(), true, false),
        ("TtlRetention", "9999d".into(), true, false),
        ("TtlRetention", "0d".into(), false, true),
        ("TtlRetention", "1d".into(), false, true),
        ("TtlRetention", "12h".into(), false, true),
        ("TtlRetention", "0s".into(), false, true),
        ("TtlRetention", "7".into(), false, true),
        // humantime takes fractions; the pattern keeps to whole days
        ("TtlRetention", "1.5d".into(), false, false),
        ("GracePeriod", "0s".into(), true, false),
        ("GracePeriod", "60s".into(), true, false),
        ("GracePeriod", "500ms".into(), true, false),
        ("GracePeriod", "999999h".into(), true, false),
        ("GracePeriod", "60".into(), false, true),
        ("GracePeriod", "1.5s".into(), false, false),
        ("GracePeriod", "-1s".into(), false, true),
        ("GracePeriod", "99999999999999999999h".into(), false, true),
        ("MaxPublishRate", "0".into(), true, false),
        ("MaxPublishRate", "1".into(), true, false),
        ("MaxPublishRate", "500".into(), true, false),
        ("MaxPublishRate", "999999999".into(), true, false),
        ("MaxPublishRate", "2.5".into(), false, true),
        ("MaxPublishRate", "0.0".into(), false, true),
        ("MaxPublishRate", "-1".into(), false, true),
        ("MaxPublishRate", "4294967296".into(), false, true),
        ("MetricsNamespace", "OutboxRelay".into(), true, false),
        ("MetricsNamespace", "Team/Orders".into(), true, false),
        ("MetricsNamespace", long(255), true, false),
        ("MetricsNamespace", long(256), false, false),
        ("MetricsNamespace", String::new(), false, false),
    ];

    // The defaults are taken by the patterns and by both relays
    for (parameter, _) in RELAY_PARAMETERS {
        assert!(
            pattern(parameter).is_match(&defaults[parameter]),
            "{parameter}"
        );
    }
    poller_takes(&defaults).unwrap();
    stream_relay_takes(&defaults).unwrap();

    for (parameter, value, allowed, refused) in &cases {
        let mut values = defaults.clone();
        values.insert(parameter, value.clone());
        let verdicts = [poller_takes(&values), stream_relay_takes(&values)];

        // What the pattern takes, both relays take
        assert_eq!(
            pattern(parameter).is_match(value),
            *allowed,
            "{parameter} = {value:?}: the pattern"
        );
        if *allowed {
            for verdict in &verdicts {
                assert!(verdict.is_ok(), "{parameter} = {value:?}: {verdict:?}");
            }
        }
        // And the bad values are bad indeed: a relay refuses each (the pattern keeps them out)
        if *refused {
            assert!(
                verdicts.iter().any(Result::is_err),
                "{parameter} = {value:?} is taken by both relays"
            );
        }
    }
}

/// The metric names of the table in docs/operations.md's "Metrics" section.
fn documented_metrics() -> BTreeSet<String> {
    let docs =
        std::fs::read_to_string(outbox_tests::workspace_root().join("docs/operations.md")).unwrap();
    let section = &docs[docs.find("### Metrics").expect("a Metrics section")..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn the_dashboard_shows_what_the_on_call_engineer_needs_from_metrics_the_relays_emit() {
    use relay_runtime::metrics as m;
    let documented = documented_metrics();
    assert!(documented.contains(m::PUBLISHED), "{documented:?}");

    // Given the dashboard of a single-region stack and of a global table's
    let single = Template::embedded().unwrap().with_parameters(&[]).unwrap();
    let global = Template::embedded()
        .unwrap()
        .with_parameters(&[
            ("GlobalTableRegions", "us-east-1,eu-west-1"),
            ("GlobalTableName", "orders"),
        ])
        .unwrap();
    let single = dashboard_metrics(&single);
    let global = dashboard_metrics(&global);

    // Then a global table's shows every widget a single region's does, and the regions adopted
    assert!(
        single.iter().all(|metric| global.contains(metric)),
        "{single:?} {global:?}"
    );
    assert!(
        !single.iter().any(|(_, n)| n == m::REGIONS_ADOPTED),
        "{single:?}"
    );
    assert!(
        global.contains(&("NS".to_owned(), m::REGIONS_ADOPTED.to_owned())),
        "{global:?}"
    );
    let named = global;

    // Then the relays' metrics are all in docs/operations.md's table, the others AWS's own
    for (namespace, name) in &named {
        match namespace.as_str() {
            "NS" => assert!(documented.contains(name), "{name} is not documented"),
            "AWS/Lambda" => assert_eq!(name, "IteratorAge"),
            "ECS/ContainerInsights" => assert_eq!(name, "RunningTaskCount"),
            other => panic!("{other}/{name}"),
        }
    }
    // And it shows lag, backlog, oldest pending age, publishes, failed calls by operation,
    // dead letters, throttling and the publish rate, the fleet and its shards, the mapping's lag
    for wanted in [
        m::RELAY_LAG,
        m::BACKLOG,
        m::OLDEST_PENDING_AGE,
        m::PUBLISHED,
        m::FAILED_CALLS,
        m::DEAD_LETTERED,
        m::THROTTLED,
        m::PUBLISH_RATE_LIMIT,
        m::LEASES_OWNED,
        "RunningTaskCount",
        "IteratorAge",
    ] {
        assert!(
            named.iter().any(|(_, n)| n == wanted),
            "{wanted} is not on the dashboard: {named:?}"
        );
    }
    // Failed calls by operation: the alarm's query, grouped
    let yaml = outbox_infra::TEMPLATE_YAML;
    assert!(
        yaml.contains(&failed_calls_query(" GROUP BY Operation").replace('"', "\\\"")),
        "the failed-calls widget"
    );
}

/// The metrics `template`'s dashboard names, as (namespace, name), the namespace parameter's
/// value written `NS`: its body with the substitutions made as CloudFormation makes them, the
/// global table's widgets (`GlobalTableWidgets`, empty on a single-region table) among them.
fn dashboard_metrics(template: &Template) -> Vec<(String, String)> {
    let dashboard = properties(template, "Dashboard");
    let [body, variables] = dashboard["DashboardBody"]["!Sub"]
        .as_array()
        .expect("the dashboard body is a !Sub with variables")
        .as_slice()
    else {
        panic!("{dashboard}")
    };
    let widgets = &variables["GlobalTableWidgets"];
    let widgets = widgets["!Sub"].as_str().or(widgets.as_str()).unwrap();
    let body = body
        .as_str()
        .unwrap()
        .replace("${GlobalTableWidgets}", widgets);
    let body = regex::Regex::new(r"\$\{([A-Za-z:.]+)\}")
        .unwrap()
        .replace_all(&body, |c: &regex::Captures<'_>| match &c[1] {
            "MetricsNamespace" => "NS".to_owned(),
            "OldestPendingAlarmSeconds" | "IteratorAgeAlarmMilliseconds" => "1".to_owned(),
            other => other.replace([':', '.'], "-"),
        });
    let body: Value = serde_json::from_str(&body).expect("the dashboard body is JSON");

    // Every metric its widgets name
    let mut named: Vec<(String, String)> = Vec::new();
    let insights = regex::Regex::new(r#"SUM\((\w+)\) FROM SCHEMA\("NS""#).unwrap();
    for widget in body["widgets"].as_array().unwrap() {
        for metric in widget["properties"]["metrics"].as_array().unwrap() {
            let metric = metric.as_array().unwrap();
            match &metric[0] {
                Value::String(namespace) => {
                    named.push((namespace.clone(), metric[1].as_str().unwrap().to_owned()))
                }
                Value::Object(expression) => {
                    let expression = expression["expression"].as_str().unwrap();
                    for found in insights.captures_iter(expression) {
                        named.push(("NS".to_owned(), found[1].to_owned()));
                    }
                }
                other => panic!("{other}"),
            }
        }
    }

    named
}

#[test]
fn the_artefacts_are_built_for_the_templates_architectures_and_the_deploy_asks_nothing() {
    let template = Template::embedded().unwrap();
    let root = outbox_tests::workspace_root();
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();

    // The Lambda zip is built for the function's architecture, the image for the tasks'
    let function = properties(&template, "RelayFunction");
    assert_eq!(function["Architectures"], json!(["arm64"]));
    assert!(
        makefile.contains("LAMBDA_TARGET := aarch64-unknown-linux-gnu"),
        "make lambda-zip builds for arm64"
    );
    assert!(
        function["CodeUri"]
            .as_str()
            .is_some_and(|uri| uri.ends_with("/lambda/relay-stream/bootstrap.zip")),
        "{function}"
    );
    assert!(makefile.contains("LAMBDA_DIR := $(TARGET_DIR)/lambda"));
    for task in ["PollerTaskDefinition", "OperatorTaskDefinition"] {
        assert_eq!(
            properties(&template, task)["RuntimePlatform"]["CpuArchitecture"],
            "ARM64",
            "{task}"
        );
    }
    assert!(makefile.contains("docker buildx build --platform linux/arm64"));
    // And the image's tag has no default: a deploy names the tag it pushed
    assert!(
        template
            .parameter("PollerImageTag")
            .unwrap()
            .default
            .is_none()
    );

    // And docs/operations.md's deploy section runs without a prompt: no `sam build` (its
    // cargo-lambda method is a preview feature that asks), no guided deploy, no changeset to confirm
    let docs = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let deploy = &docs[docs.find("## Deploy").unwrap()..docs.find("## Parameters").unwrap()];
    let commands: Vec<&str> = deploy
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(
        !commands.iter().any(|l| l.starts_with("sam build")),
        "{deploy}"
    );
    assert!(!commands.iter().any(|l| l.contains("--guided")), "{deploy}");
    assert!(deploy.contains("make lambda-zip"));
    assert!(deploy.contains("make poller-image"));
    assert!(deploy.contains("--no-confirm-changeset"));
}

/// The template as CloudFormation creates it for the target kind `kind` (a bus kind, or `sns`,
/// `sqs`, `kinesis` with a target of that kind, encrypted with a key when `kms`).
fn for_target_kind(kind: TargetKind, kms: bool) -> Template {
    use outbox_infra::template::parameter::{
        BUS, EVENT_BUS_KIND, EVENT_TARGET, EVENT_TARGET_KIND, EVENT_TARGET_KMS_KEY_ARN,
    };
    let kind_name = kind.to_string();
    let key = if kms { KMS_KEY } else { "" };
    let parameters: Vec<(&str, &str)> = match kind {
        TargetKind::Classic | TargetKind::Custom => {
            vec![(EVENT_TARGET_KIND, BUS), (EVENT_BUS_KIND, &kind_name)]
        }
        TargetKind::Sns => vec![(EVENT_TARGET_KIND, &kind_name), (EVENT_TARGET, TOPIC_ARN)],
        TargetKind::Sqs => vec![(EVENT_TARGET_KIND, &kind_name), (EVENT_TARGET, QUEUE_ARN)],
        TargetKind::Kinesis => vec![(EVENT_TARGET_KIND, &kind_name), (EVENT_TARGET, STREAM_ARN)],
    };
    let mut parameters = parameters;
    parameters.push((EVENT_TARGET_KMS_KEY_ARN, key));
    Template::embedded()
        .unwrap()
        .with_parameters(&parameters)
        .unwrap()
}

const TOPIC_ARN: &str = "arn:aws:sns:eu-west-1:123456789012:orders.fifo";
const QUEUE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:orders";
const STREAM_ARN: &str = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders";
const KMS_KEY: &str = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

/// The poller task's environment entry `name`'s value.
fn poller_variable(template: &Template, name: &str) -> Value {
    poller_environment(template)
        .into_iter()
        .find(|v| v["Name"] == name)
        .unwrap_or_else(|| panic!("the poller task sets {name}"))["Value"]
        .clone()
}

#[test]
fn each_target_kind_gives_both_relays_its_target_and_kind_and_the_roles_its_calls_only() {
    use clap::Args;
    use outbox_infra::template::logical_id::{CUSTOM_EVENT_BUS, EVENT_BUS};

    // The variables are the ones the relays' publisher flags read, the aliases the buses' old ones
    let flags = relay_runtime::PublisherArgs::augment_args(clap::Command::new("relay"));
    let env_of = |id: &str| {
        flags
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_env())
            .and_then(|e| e.to_str())
            .map(str::to_owned)
    };
    assert_eq!(env_of("target_kind").as_deref(), Some("EVENT_TARGET_KIND"));
    assert_eq!(env_of("target").as_deref(), Some("EVENT_TARGET"));
    assert_eq!(env_of("event_bus_kind").as_deref(), Some("EVENT_BUS_KIND"));
    assert_eq!(env_of("event_bus_name").as_deref(), Some("EVENT_BUS_NAME"));

    // The target each kind names, and how the relays' setting names it
    for (kind, target_value, bus) in [
        (
            TargetKind::Classic,
            json!({"!Ref": EVENT_BUS}),
            Some(EVENT_BUS),
        ),
        (
            TargetKind::Custom,
            json!({"!Ref": CUSTOM_EVENT_BUS}),
            Some(CUSTOM_EVENT_BUS),
        ),
        (TargetKind::Sns, json!({"!Ref": "EventTarget"}), None),
        (TargetKind::Kinesis, json!({"!Ref": "EventTarget"}), None),
        (TargetKind::Sqs, Value::Null, None),
    ] {
        // Given the template for that target kind
        let template = for_target_kind(kind, false);
        for created in [EVENT_BUS, CUSTOM_EVENT_BUS] {
            assert_eq!(
                template.resources.contains_key(created),
                bus == Some(created),
                "{kind}: {created}"
            );
        }

        // When the relays' environments are read
        let lambda = properties(&template, "RelayFunction");
        let variables = &lambda["Environment"]["Variables"];
        let kind_value = &variables["EVENT_TARGET_KIND"];
        assert_eq!(kind_value, &poller_variable(&template, "EVENT_TARGET_KIND"));
        assert_eq!(
            variables["EVENT_TARGET"],
            poller_variable(&template, "EVENT_TARGET"),
            "{kind}"
        );
        assert!(variables.get("EVENT_BUS_NAME").is_none(), "{variables}");

        // Then both relays get the kind and the target the relays take for it
        if kind.is_bus() {
            assert!(is_ref_to(kind_value, "EventBusKind"), "{kind_value}");
            assert_eq!(variables["EVENT_TARGET"], target_value, "{kind}");
        } else {
            assert!(is_ref_to(kind_value, "EventTargetKind"), "{kind_value}");
            if kind == TargetKind::Sqs {
                // A queue's URL, built from its ARN: https://sqs.REGION.URLSUFFIX/ACCOUNT/NAME
                let url = variables["EVENT_TARGET"].to_string();
                assert!(
                    url.contains("https://sqs.${Region}.${AWS::URLSuffix}/${Account}/${Name}"),
                    "{url}"
                );
                for (place, part) in [("3", "Region"), ("4", "Account"), ("5", "Name")] {
                    assert!(url.contains(place) && url.contains(part), "{url}");
                }
            } else {
                assert_eq!(variables["EVENT_TARGET"], target_value, "{kind}");
            }
        }

        // And each relay's role grants exactly its job's calls for that kind
        let mut stream = jobs(relay_stream::permissions::calls(kind));
        stream.extend(jobs(
            relay_stream::permissions::ON_FAILURE_DESTINATION.to_vec(),
        ));
        let publishes = |grants: &BTreeSet<Granted>| -> BTreeSet<Granted> {
            grants
                .iter()
                .filter(|g| {
                    matches!(
                        g,
                        Granted::Job(_, relay_runtime::permissions::Target::EventTarget)
                    )
                })
                .cloned()
                .collect()
        };
        // What the roles may do on the target: publish, and describe it (the start-up probe)
        let mut expected_publish = jobs(kind.spec().calls.to_vec());
        expected_publish.extend(jobs(kind.spec().describe_calls.to_vec()));
        assert_eq!(publishes(&stream), expected_publish, "{kind}");
        for (role, calls) in [
            ("RelayFunctionRole", stream),
            (
                "PollerTaskRole",
                jobs(relay_poller::permissions::service(kind)),
            ),
            (
                "OperatorTaskRole",
                jobs(relay_poller::permissions::operator(kind)),
            ),
        ] {
            let grants = granted(&template, role);
            assert_eq!(publishes(&grants), expected_publish, "{kind} {role}");
            let jobs_granted: BTreeSet<Granted> = grants
                .iter()
                .filter(|g| matches!(g, Granted::Job(..)))
                .cloned()
                .collect();
            assert_eq!(jobs_granted, calls, "{kind} {role}");
            // No KMS without a key
            assert!(
                !grants.iter().any(|g| format!("{g:?}").contains("kms:")),
                "{kind} {role}"
            );
        }
    }
    // The default is the classic bus, as before target kinds
    let default = Template::embedded().unwrap().with_parameters(&[]).unwrap();
    assert_eq!(
        default.resources.keys().collect::<Vec<_>>(),
        for_target_kind(TargetKind::Classic, false)
            .resources
            .keys()
            .collect::<Vec<_>>()
    );
}

#[test]
fn an_encrypted_target_lets_the_relays_use_its_key_and_nothing_more() {
    for (kind, actions) in [
        (
            TargetKind::Sns,
            json!(["kms:GenerateDataKey", "kms:Decrypt"]),
        ),
        (
            TargetKind::Sqs,
            json!(["kms:GenerateDataKey", "kms:Decrypt"]),
        ),
        (TargetKind::Kinesis, json!(["kms:GenerateDataKey"])),
    ] {
        // Given the template for a target encrypted with a customer managed key
        let template = for_target_kind(kind, true);

        // Then one policy lets the three roles use that key, for what the service asks of it
        let policy = properties(&template, "TargetKmsKeyPolicy");
        let roles = policy["Roles"].to_string();
        for role in ["RelayFunctionRole", "PollerTaskRole", "OperatorTaskRole"] {
            assert!(roles.contains(role), "{kind}: {roles}");
        }
        let statement = &policy["PolicyDocument"]["Statement"][0];
        assert_eq!(statement["Action"], actions, "{kind}");
        assert!(
            is_ref_to(&statement["Resource"], "EventTargetKmsKeyArn"),
            "{statement}"
        );
    }
    // And a bus, or an unencrypted target, has no such policy
    for kind in [TargetKind::Classic, TargetKind::Sqs] {
        assert!(
            !for_target_kind(kind, false)
                .resources
                .contains_key("TargetKmsKeyPolicy")
        );
    }
    assert!(
        !for_target_kind(TargetKind::Custom, true)
            .resources
            .contains_key("TargetKmsKeyPolicy")
    );
}

#[test]
fn the_custom_bus_retains_events_and_its_fifo_subscriber_delivers_each_aggregate_in_order() {
    use outbox_infra::template::logical_id::{
        CUSTOM_EVENT_BUS, ORDER_EVENTS_DELIVERY_FAILURE_QUEUE, ORDER_EVENTS_DELIVERY_ROLE,
        ORDER_EVENTS_QUEUE, ORDER_EVENTS_SUBSCRIBER,
    };
    use outbox_infra::template::parameter::CUSTOM_BUS_RETENTION_DAYS;
    let template = for_target_kind(TargetKind::Custom, false);

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

/// The template with the example consumer deployed on the relays' target of `kind`.
fn with_example_consumer(kind: TargetKind) -> Template {
    use outbox_infra::template::parameter::{EVENT_TARGET, EVENT_TARGET_KIND};
    let (kind_name, target) = match kind {
        TargetKind::Sqs => ("sqs", QUEUE_ARN),
        TargetKind::Kinesis => ("kinesis", STREAM_ARN),
        other => panic!("no example consumer on {other}"),
    };
    Template::embedded()
        .unwrap()
        .with_parameters(&[
            (EVENT_TARGET_KIND, kind_name),
            (EVENT_TARGET, target),
            ("DeployExampleConsumer", "true"),
        ])
        .unwrap()
}

/// Each action `role`'s own statements grant, with the logical id or parameter of what they
/// grant it on (`*` for a wildcard).
fn own_grants(template: &Template, role: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for document in own_documents(template, role) {
        for statement in document["Statement"].as_array().unwrap() {
            assert_eq!(statement["Effect"], "Allow", "{statement}");
            let text = statement["Resource"].to_string();
            let on = [
                "ExampleConsumerIdempotencyTable",
                "ExampleStockTable",
                "ExampleConsumerLogGroup",
                "EventTargetKmsKeyArn",
                "EventTarget",
            ]
            .into_iter()
            .find(|id| text.contains(id))
            .map_or_else(
                || {
                    assert_eq!(text, r#""*""#, "{role}: {statement}");
                    "*".to_owned()
                },
                str::to_owned,
            );
            let actions = match &statement["Action"] {
                Value::Array(items) => items.clone(),
                one => vec![one.clone()],
            };
            for action in actions {
                found.insert((action.as_str().unwrap().to_owned(), on.clone()));
            }
        }
    }
    found
}

#[test]
fn the_example_consumer_is_an_option_on_the_relays_queue_or_stream_reporting_batch_item_failures() {
    const CONSUMER: [&str; 6] = [
        "ExampleConsumerFunction",
        "ExampleConsumerRole",
        "ExampleConsumerEventSourceMapping",
        "ExampleConsumerIdempotencyTable",
        "ExampleStockTable",
        "ExampleConsumerLogGroup",
    ];
    // Off by default, whatever the target
    let parameter = Template::embedded()
        .unwrap()
        .parameter("DeployExampleConsumer")
        .unwrap()
        .clone();
    assert_eq!(
        serde_json::to_value(&parameter.default).unwrap(),
        json!("false")
    );
    for &kind in TargetKind::all() {
        let template = for_target_kind(kind, false);
        for id in CONSUMER {
            assert!(!template.resources.contains_key(id), "{kind}: {id}");
        }
    }
    // And refused on a bus or a topic (its mapping reads the relays' target)
    let yaml = include_str!("../../infra/template.yaml");
    let rule = &yaml[yaml.find("  ExampleConsumerOnQueueOrStream:\n").unwrap()..];
    assert!(
        rule.contains("- Assert: !Contains [[sqs, kinesis], !Ref EventTargetKind]"),
        "{rule}"
    );

    for (kind, reads) in [
        (
            TargetKind::Sqs,
            &[
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:ReceiveMessage",
            ][..],
        ),
        (
            TargetKind::Kinesis,
            &[
                "kinesis:DescribeStream",
                "kinesis:DescribeStreamSummary",
                "kinesis:GetRecords",
                "kinesis:GetShardIterator",
                "kinesis:ListShards",
            ][..],
        ),
    ] {
        // Given the template with the example consumer on a queue or a stream
        let template = with_example_consumer(kind);
        for id in CONSUMER {
            assert!(template.resources.contains_key(id), "{kind}: {id}");
        }

        // Then its mapping reads the relays' target and lets the function report each batch
        // item's failure (the batch processor's response)
        let mapping = properties(&template, "ExampleConsumerEventSourceMapping");
        assert!(
            is_ref_to(&mapping["EventSourceArn"], "EventTarget"),
            "{mapping}"
        );
        assert_eq!(
            mapping["FunctionResponseTypes"],
            json!(["ReportBatchItemFailures"]),
            "{kind}"
        );
        assert_eq!(
            mapping.get("StartingPosition").is_some(),
            kind == TargetKind::Kinesis,
            "{kind}: {mapping}"
        );

        // And the function runs the example consumer's bootstrap on its own tables
        let function = properties(&template, "ExampleConsumerFunction");
        assert_eq!(
            function["CodeUri"],
            "../target/lambda/example-consumer/bootstrap.zip"
        );
        let variables = function["Environment"]["Variables"].to_string();
        assert!(
            variables.contains("ExampleConsumerIdempotencyTable")
                && variables.contains("ExampleStockTable"),
            "{variables}"
        );
        // and reads payloads from the stack's payload bucket only (PAYLOAD_BUCKET)
        assert!(
            is_ref_to(
                &function["Environment"]["Variables"]["PAYLOAD_BUCKET"],
                "PayloadBucket"
            ),
            "{variables}"
        );

        // And its role grants exactly what the consumer calls (IDEMPOTENCY_TABLE_ACTIONS and
        // STOCK_TABLE_ACTIONS, which role_calls checks against its calls), the payload reads
        // of PayloadConsumerPolicy, and what Lambda does with it: the mapping's reads of the
        // source, logs, traces
        let mut expected: BTreeSet<(String, String)> = BTreeSet::new();
        let mut grant = |actions: &[&str], on: &str| {
            for action in actions {
                expected.insert(((*action).to_owned(), on.to_owned()));
            }
        };
        grant(
            order_consumer::IDEMPOTENCY_TABLE_ACTIONS,
            "ExampleConsumerIdempotencyTable",
        );
        grant(order_consumer::STOCK_TABLE_ACTIONS, "ExampleStockTable");
        grant(reads, "EventTarget");
        grant(
            &["logs:CreateLogStream", "logs:PutLogEvents"],
            "ExampleConsumerLogGroup",
        );
        grant(&["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "*");
        assert_eq!(
            own_grants(&template, "ExampleConsumerRole"),
            expected,
            "{kind}"
        );
        let role = properties(&template, "ExampleConsumerRole");
        assert!(
            role["ManagedPolicyArns"]
                .to_string()
                .contains("PayloadConsumerPolicy"),
            "{role}"
        );
    }
}

#[tokio::test]
async fn the_roles_that_re_create_events_may_put_an_event_item_but_never_an_order() {
    use outbox_shared::schema::OUTBOX_ATTRIBUTES;
    let template = Template::embedded().unwrap();

    // Given an order and its event, as the writer stores them
    let env = TestEnv::new().await;
    env.create_orders(1, 1).await;
    let items = env
        .dynamodb
        .scan()
        .table_name(&env.table_name)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let attributes_of = |entity_type: &str| -> BTreeSet<String> {
        items
            .iter()
            .find(|i| {
                i.get(attr::ENTITY_TYPE).and_then(|v| v.as_s().ok())
                    == Some(&entity_type.to_owned())
            })
            .unwrap_or_else(|| panic!("the writer's {entity_type} item"))
            .keys()
            .cloned()
            .collect()
    };
    let order = attributes_of(entity::ORDER);
    let event = attributes_of(entity::OUTBOX_EVENT);

    for role in ["PollerTaskRole", "OperatorTaskRole"] {
        let puts: Vec<Value> = own_documents(&template, role)
            .iter()
            .flat_map(|d| d["Statement"].as_array().unwrap().clone())
            .filter(|s| {
                s["Action"].to_string().contains("dynamodb:PutItem")
                    && s["Resource"].to_string().contains("OutboxTable")
            })
            .collect();
        assert_eq!(
            puts.len(),
            1,
            "{role}: its puts on the outbox table: {puts:?}"
        );
        let put = &puts[0];
        // The put is limited to an outbox item's attributes and returns none
        let allowed: BTreeSet<String> = put
            .pointer("/Condition/ForAllValues:StringEquals/dynamodb:Attributes")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("{role} may put any attribute: {put}"))
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            allowed,
            OUTBOX_ATTRIBUTES.iter().map(|a| (*a).to_owned()).collect(),
            "{role}"
        );
        assert_eq!(
            put.pointer("/Condition/StringEqualsIfExists/dynamodb:ReturnValues"),
            Some(&json!(["NONE"])),
            "{role}: {put}"
        );

        // Then a put of the order names attributes the statement does not allow (IAM refuses a
        // request naming any attribute outside a ForAllValues list), and a put of the event none
        let refused: Vec<&String> = order.difference(&allowed).collect();
        assert!(
            !refused.is_empty(),
            "{role} may put the order's item: {order:?}"
        );
        assert!(
            event.is_subset(&allowed),
            "{role} may not re-create the event: {:?}",
            event.difference(&allowed).collect::<Vec<_>>()
        );
    }
}

mod global_table_stacks {
    //! The global-table option (`GlobalTableRegions`): one stack per region, the first one
    //! creating the outbox and lease tables as global tables with a replica per region, every
    //! stack's relays reading its own region's replica and publishing its own region's events,
    //! with roles that grant what the code calls on the tables of the stack's region.

    use outbox_infra::template::logical_id::{
        LEASE_GLOBAL_TABLE, LEASE_TABLE, OUTBOX_GLOBAL_TABLE, OUTBOX_TABLE,
    };
    use outbox_infra::template::parameter::{
        GLOBAL_TABLE_NAME, GLOBAL_TABLE_REGIONS, GLOBAL_TABLE_STREAM_ARN,
    };

    use super::*;

    const REGIONS: [&str; 3] = ["us-east-1", "eu-west-1", "ap-south-1"];
    const TABLE: &str = "orders";
    /// A multi-Region key's ARN in the first region (Hardened).
    const MRK: &str = "arn:aws:kms:us-east-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab";

    fn stream_arn(region: &str) -> String {
        format!(
            "arn:aws:dynamodb:{region}:123456789012:table/{TABLE}/stream/2026-01-01T00:00:00.000"
        )
    }

    /// The stack of `region` for a global table of [`REGIONS`], with `more` parameters: the first
    /// region's creates the global tables (no `GlobalTableStreamArn`), the others read their
    /// replica's stream.
    fn stack(region: &str, more: &[(&str, &str)]) -> Template {
        let regions = REGIONS.join(",");
        let stream = stream_arn(region);
        let mut values = vec![
            (GLOBAL_TABLE_REGIONS, regions.as_str()),
            (GLOBAL_TABLE_NAME, TABLE),
        ];
        if region != REGIONS[0] {
            values.push((GLOBAL_TABLE_STREAM_ARN, stream.as_str()));
        }
        values.extend_from_slice(more);
        Template::embedded()
            .unwrap()
            .with_parameters(&values)
            .unwrap()
    }

    #[test]
    fn each_regions_stack_alarms_while_its_pollers_publish_another_regions_events() {
        use relay_runtime::metrics::REGIONS_ADOPTED;
        // Given a single-region stack and each region's stack of a global table
        let single = Template::embedded().unwrap().with_parameters(&[]).unwrap();
        assert!(single.resource("RegionAdoptedAlarm").is_err());
        for region in REGIONS {
            let template = stack(region, &[]);
            // Then the region's alarm watches the metric its pollers emit while they publish
            // another region's partitions, from the first one
            let alarm = properties(&template, "RegionAdoptedAlarm");
            assert_watches_the_pollers_metric(&alarm, REGIONS_ADOPTED);
            assert_eq!(alarm["Statistic"], "Maximum");
            assert_eq!(alarm["Threshold"], 0);
            assert_eq!(alarm["ComparisonOperator"], "GreaterThanThreshold");
        }
    }

    fn variable(template: &Template, name: &str) -> Value {
        properties(template, "RelayFunction")["Environment"]["Variables"][name].clone()
    }

    #[test]
    fn the_first_regions_stack_creates_the_outbox_and_lease_tables_global_with_a_replica_per_region()
     {
        // Given the single-region tables as the template declares them, and the stacks of a
        // global table of three regions
        let single = Template::embedded().unwrap();
        let creating = stack(REGIONS[0], &[]);
        let hardened = stack(
            REGIONS[0],
            &[("Hardened", "true"), ("HardenedKmsKeyArn", MRK)],
        );

        // Then the first region's stack creates both as global tables, with the single-region
        // tables' keys, index, stream view and TTL, and no single-region table
        assert_eq!(
            creating.table(OUTBOX_GLOBAL_TABLE).unwrap(),
            single.outbox_table().unwrap()
        );
        let (lease, single_lease) = (
            creating.table(LEASE_GLOBAL_TABLE).unwrap(),
            single.lease_table().unwrap(),
        );
        assert_eq!(lease.key_schema, single_lease.key_schema);
        assert_eq!(
            lease.attribute_definitions,
            single_lease.attribute_definitions
        );
        assert_eq!(
            lease.time_to_live_specification,
            single_lease.time_to_live_specification
        );
        for id in [OUTBOX_TABLE, LEASE_TABLE] {
            assert!(!creating.resources.contains_key(id), "{id}");
        }
        // A replica in every region listed, in order, for both tables, named from GlobalTableName
        // (the same name in every region's stack)
        for (id, name) in [
            (OUTBOX_GLOBAL_TABLE, TABLE.to_owned()),
            (LEASE_GLOBAL_TABLE, format!("{TABLE}-leases")),
        ] {
            assert_eq!(creating.replica_regions(id).unwrap(), REGIONS, "{id}");
            let table_name = creating.resource(id).unwrap().properties.get("TableName");
            assert_eq!(creating.value(table_name.unwrap()).unwrap(), name, "{id}");
        }
        // Each outbox replica recoverable and protected from deletion; both tables encrypted
        // with KMS, the AWS managed key by default and, Hardened, each region's copy of the
        // multi-Region key (its key id, which DynamoDB resolves in the replica's region)
        for (template, key) in [
            (&creating, None),
            (&hardened, Some("mrk-1234abcd12ab34cd56ef1234567890ab")),
        ] {
            for id in [OUTBOX_GLOBAL_TABLE, LEASE_GLOBAL_TABLE] {
                let table = properties(template, id);
                assert_eq!(
                    table["SSESpecification"],
                    json!({"SSEEnabled": true, "SSEType": "KMS"})
                );
                for replica in table["Replicas"].as_array().unwrap() {
                    if id == OUTBOX_GLOBAL_TABLE {
                        assert_eq!(
                            replica["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
                            true
                        );
                        assert_eq!(replica["DeletionProtectionEnabled"], true);
                    }
                    if key.is_none() {
                        assert!(replica.get("SSESpecification").is_none(), "{replica}");
                    }
                }
                let replicas = template.resource(id).unwrap().properties.get("Replicas");
                let keys: Vec<Option<String>> = replicas
                    .and_then(|r| r.as_sequence())
                    .unwrap()
                    .iter()
                    .map(|r| {
                        let key = r
                            .get("SSESpecification")
                            .and_then(|s| s.get("KMSMasterKeyId"));
                        key.map(|k| template.value(k).unwrap())
                    })
                    .collect();
                assert_eq!(keys, vec![key.map(str::to_owned); REGIONS.len()], "{id}");
            }
        }

        // And the other regions' stacks create no table: they use their replicas
        for region in &REGIONS[1..] {
            let other = stack(region, &[]);
            for id in [
                OUTBOX_TABLE,
                LEASE_TABLE,
                OUTBOX_GLOBAL_TABLE,
                LEASE_GLOBAL_TABLE,
            ] {
                assert!(!other.resources.contains_key(id), "{region}: {id}");
            }
            // named by the global tables' name, the same in every region
            assert!(is_ref_to(
                &variable(&other, "TABLE_NAME"),
                GLOBAL_TABLE_NAME
            ));
            assert!(is_ref_to(
                &poller_variable(&other, "TABLE_NAME"),
                GLOBAL_TABLE_NAME
            ));
            assert_eq!(
                poller_variable(&other, "OUTBOX_LEASE_TABLE"),
                json!({"!Sub": "${GlobalTableName}-leases"})
            );
        }
        // The creating stack's relays wait for the tables it creates
        assert!(is_ref_to(
            &variable(&creating, "TABLE_NAME"),
            OUTBOX_GLOBAL_TABLE
        ));
        assert!(is_ref_to(
            &poller_variable(&creating, "TABLE_NAME"),
            OUTBOX_GLOBAL_TABLE
        ));
        assert!(is_ref_to(
            &poller_variable(&creating, "OUTBOX_LEASE_TABLE"),
            LEASE_GLOBAL_TABLE
        ));
    }

    #[test]
    fn each_regions_stack_relays_its_regions_events_from_its_own_replicas_stream() {
        for region in REGIONS {
            // Given the stack of a region of the global table
            let template = stack(region, &[]);

            // Then its stream relay reads its own region's replica's stream: the one the first
            // region's stack creates, or the one GlobalTableStreamArn names
            let mapping = "RelayEventSourceMapping";
            let source = &properties(&template, mapping)["EventSourceArn"];
            if region == REGIONS[0] {
                assert_eq!(source, &json!({"!GetAtt": "OutboxGlobalTable.StreamArn"}));
            } else {
                assert_eq!(
                    template.scalar_property(mapping, "EventSourceArn").unwrap(),
                    Some(stream_arn(region)),
                    "{region}"
                );
            }
            // And its mapping passes the INSERTs stamped with its own region, no other's
            let patterns = template.stream_filter_patterns_in(region).unwrap();
            let stamped: Vec<Value> = patterns
                .iter()
                .map(|p| serde_json::from_str::<Value>(p).unwrap())
                .map(|p| p["dynamodb"]["NewImage"][attr::ORIGIN_REGION]["S"].clone())
                .filter(|origin| origin.is_array() && origin[0].is_string())
                .collect();
            assert_eq!(stamped, [json!([region])], "{region}: {patterns:?}");
            // And both relays and the operator's commands know every region of the table
            assert!(is_ref_to(
                &variable(&template, "OUTBOX_REGIONS"),
                GLOBAL_TABLE_REGIONS
            ));
            assert!(is_ref_to(
                &poller_variable(&template, "OUTBOX_REGIONS"),
                GLOBAL_TABLE_REGIONS
            ));
            let operator = properties(&template, "OperatorTaskDefinition");
            assert!(
                operator["ContainerDefinitions"][0]["Environment"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["Name"] == "OUTBOX_REGIONS"
                        && is_ref_to(&v["Value"], GLOBAL_TABLE_REGIONS))
            );
        }
    }

    #[test]
    fn on_a_global_table_each_role_grants_exactly_the_calls_its_job_makes_on_its_regions_replicas()
    {
        for region in REGIONS {
            // Given the stack of a region of the global table
            let template = stack(region, &[]);

            // Then each role grants exactly what the code calls, as on a single-region table
            // (the poller's region items, REGION#… and ADOPTION#…, are lease table calls)
            assert_eq!(
                granted(&template, "RelayFunctionRole"),
                stream_relay_grants(),
                "{region}: RelayFunctionRole"
            );
            assert_eq!(
                granted(&template, "PollerTaskRole"),
                jobs(relay_poller::permissions::service(TargetKind::Classic)),
                "{region}: PollerTaskRole"
            );
            assert_eq!(
                granted(&template, "OperatorTaskRole"),
                jobs(relay_poller::permissions::operator(TargetKind::Classic)),
                "{region}: OperatorTaskRole"
            );
            // And on the tables of the stack's own region, named by GlobalTableName
            for role in ["RelayFunctionRole", "PollerTaskRole", "OperatorTaskRole"] {
                for document in own_documents(&template, role) {
                    for statement in document["Statement"].as_array().unwrap() {
                        let resource = statement["Resource"].to_string();
                        if resource.contains("dynamodb") || resource.contains("Table") {
                            assert!(
                                resource.contains(
                                    "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${GlobalTableName}"
                                ),
                                "{region}: {role}: {statement}"
                            );
                        }
                    }
                }
            }
        }
    }
}
