use super::*;
use outbox_shared::schema::{DEFAULT_INDEX_NAME, attr};

fn template() -> Template {
    Template::embedded().expect("the embedded template parses")
}

#[test]
fn table_keys_and_index_use_the_shared_schema_names() {
    let table = template().outbox_table().unwrap();

    let keys: Vec<_> = table
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
        .collect();
    assert_eq!(keys, [(attr::PK, "HASH"), (attr::SK, "RANGE")]);
    let index = &table.global_secondary_indexes[0];
    assert_eq!(table.global_secondary_indexes.len(), 1);
    assert_eq!(index.index_name, DEFAULT_INDEX_NAME);
    let index_keys: Vec<_> = index
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
        .collect();
    assert_eq!(
        index_keys,
        [(attr::GSI1PK, "HASH"), (attr::GSI1SK, "RANGE")]
    );
    assert_eq!(index.projection.projection_type, "ALL");
    let ttl = table.time_to_live_specification.unwrap();
    assert_eq!(
        (ttl.attribute_name.as_str(), ttl.enabled),
        (attr::TTL, true)
    );
}

#[test]
fn ref_to_a_parameter_resolves_to_its_default_and_other_intrinsics_do_not() {
    let t = Template::parse(
        "Parameters:\n  Days: {Type: Number, Default: 30}\nResources:\n  A:\n    Type: X\n    \
         Properties:\n      Days: !Ref Days\n      Arn: !GetAtt B.Arn\n      On: true\n",
    )
    .unwrap();

    assert_eq!(
        t.scalar_property("A", "Days").unwrap().as_deref(),
        Some("30")
    );
    assert_eq!(t.scalar_property("A", "Arn").unwrap(), None);
    let all = t.scalar_properties("A").unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["On"], "true");
    assert!(matches!(
        t.scalar_property("Nope", "Days"),
        Err(TemplateError::MissingResource(_))
    ));
}

const CONDITIONAL: &str = "Parameters:\n  Kind: {Type: String, Default: a, AllowedValues: [a, b]}\n\
    Conditions:\n  IsB: !Equals [!Ref Kind, b]\n  IsA: !Not [!Condition IsB]\n\
    Resources:\n  A:\n    Type: X\n    Condition: IsA\n  B:\n    Type: Y\n    Condition: IsB\n\
    \x20 Both:\n    Type: Z\n    Properties:\n      Target: !If [IsB, !Ref B, !Ref A]\n\
    \x20     Only: !If [IsB, on, !Ref AWS::NoValue]\n      List: [one, !If [IsA, two, !Ref AWS::NoValue]]\n\
    \x20     Kind: !Ref Kind\n";

#[test]
fn with_parameters_keeps_the_resources_whose_condition_holds_and_decides_each_if() {
    let t = Template::parse(CONDITIONAL).unwrap();

    let a = t.with_parameters(&[]).unwrap();
    let b = t.with_parameters(&[("Kind", "b")]).unwrap();

    assert_eq!(a.resources.keys().collect::<Vec<_>>(), ["A", "Both"]);
    assert_eq!(b.resources.keys().collect::<Vec<_>>(), ["B", "Both"]);
    let both = |t: &Template| serde_json::to_value(&t.resources["Both"].properties).unwrap();
    assert_eq!(
        both(&a),
        serde_json::json!({"Target": {"!Ref": "A"}, "List": ["one", "two"], "Kind": {"!Ref": "Kind"}})
    );
    assert_eq!(
        both(&b),
        serde_json::json!({"Target": {"!Ref": "B"}, "Only": "on", "List": ["one"], "Kind": {"!Ref": "Kind"}})
    );
    assert_eq!(
        b.scalar_property("Both", "Kind").unwrap().as_deref(),
        Some("b")
    );
}

#[test]
fn with_parameters_refuses_a_value_outside_allowed_values_and_an_unknown_parameter() {
    let t = Template::parse(CONDITIONAL).unwrap();

    let outside = t.with_parameters(&[("Kind", "c")]).unwrap_err();
    let unknown = t.with_parameters(&[("Kinds", "a")]).unwrap_err();

    assert!(outside.to_string().contains("AllowedValues"), "{outside}");
    assert!(unknown.to_string().contains("Kinds"), "{unknown}");
}

#[test]
fn each_bus_kind_creates_its_own_bus_only() {
    use super::logical_id::{CUSTOM_EVENT_BUS, EVENT_ARCHIVE, EVENT_BUS, ORDER_EVENTS_SUBSCRIBER};
    use super::parameter::{CLASSIC, CUSTOM, EVENT_BUS_KIND};

    let default = template().with_parameters(&[]).unwrap();
    let classic = template()
        .with_parameters(&[(EVENT_BUS_KIND, CLASSIC)])
        .unwrap();
    let custom = template()
        .with_parameters(&[(EVENT_BUS_KIND, CUSTOM)])
        .unwrap();

    let has = |t: &Template, id: &str| t.resources.contains_key(id);
    for t in [&default, &classic] {
        assert!(has(t, EVENT_BUS) && has(t, EVENT_ARCHIVE));
        assert!(!has(t, CUSTOM_EVENT_BUS) && !has(t, ORDER_EVENTS_SUBSCRIBER));
    }
    assert!(has(&custom, CUSTOM_EVENT_BUS) && has(&custom, ORDER_EVENTS_SUBSCRIBER));
    assert!(!has(&custom, EVENT_BUS) && !has(&custom, EVENT_ARCHIVE));
}

#[test]
fn stream_filter_is_valid_json_for_outbox_inserts_and_ttl_deletions() {
    let patterns = template().stream_filter_patterns_in("eu-west-1").unwrap();

    assert_eq!(patterns.len(), 3, "{patterns:?}");
    for (inserts, origin) in [
        (&patterns[0], serde_json::json!({"S": [{"exists": false}]})),
        (&patterns[1], serde_json::json!({"S": ["eu-west-1"]})),
    ] {
        let inserts: serde_json::Value = serde_json::from_str(inserts).unwrap();
        assert_eq!(inserts["eventName"], serde_json::json!(["INSERT"]));
        assert_eq!(
            inserts["dynamodb"]["NewImage"][attr::ENTITY_TYPE]["S"],
            serde_json::json!(["OutboxEvent"])
        );
        assert_eq!(inserts["dynamodb"]["NewImage"][attr::ORIGIN_REGION], origin);
    }
    let ttl_deletions: serde_json::Value = serde_json::from_str(&patterns[2]).unwrap();
    assert_eq!(ttl_deletions["eventName"], serde_json::json!(["REMOVE"]));
    assert_eq!(
        ttl_deletions["userIdentity"],
        serde_json::json!({"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]})
    );
    assert_eq!(
        ttl_deletions["dynamodb"]["OldImage"][attr::STATUS]["S"],
        serde_json::json!(["PENDING"])
    );
}

#[test]
fn a_global_table_has_a_replica_slot_per_region_listed_and_one_stack_creates_it() {
    use super::logical_id::{LEASE_GLOBAL_TABLE, LEASE_TABLE, OUTBOX_GLOBAL_TABLE, OUTBOX_TABLE};
    use super::parameter::{GLOBAL_TABLE_NAME, GLOBAL_TABLE_REGIONS, GLOBAL_TABLE_STREAM_ARN};
    let regions = |t: &Template, id: &str| -> Vec<serde_json::Value> {
        let properties = serde_json::to_value(&t.resources[id].properties).unwrap();
        properties["Replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["Region"].clone())
            .collect()
    };

    let single = template().with_parameters(&[]).unwrap();
    let three = template()
        .with_parameters(&[
            (GLOBAL_TABLE_REGIONS, "us-east-1,eu-west-1,ap-south-1"),
            (GLOBAL_TABLE_NAME, "orders"),
        ])
        .unwrap();
    let other_region = template()
        .with_parameters(&[
            (GLOBAL_TABLE_REGIONS, "us-east-1,eu-west-1,ap-south-1"),
            (GLOBAL_TABLE_NAME, "orders"),
            (
                GLOBAL_TABLE_STREAM_ARN,
                "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000",
            ),
        ])
        .unwrap();

    let has = |t: &Template, id: &str| t.resources.contains_key(id);
    assert!(has(&single, OUTBOX_TABLE) && has(&single, LEASE_TABLE));
    assert!(!has(&single, OUTBOX_GLOBAL_TABLE) && !has(&single, LEASE_GLOBAL_TABLE));
    for id in [OUTBOX_GLOBAL_TABLE, LEASE_GLOBAL_TABLE] {
        // Three regions fill three slots: the first two, and the third's !If
        assert_eq!(regions(&three, id).len(), 3, "{id}");
        assert_eq!(
            three.replica_regions(id).unwrap(),
            ["us-east-1", "eu-west-1", "ap-south-1"],
            "{id}"
        );
    }
    assert!(!has(&three, OUTBOX_TABLE) && !has(&three, LEASE_TABLE));
    for id in [
        OUTBOX_TABLE,
        LEASE_TABLE,
        OUTBOX_GLOBAL_TABLE,
        LEASE_GLOBAL_TABLE,
    ] {
        assert!(
            !has(&other_region, id),
            "{id} in a stack that uses the replicas"
        );
    }
}
