use super::*;
use crate::item::OutboxItem;
use proptest::prelude::*;
use serde::Deserialize;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.to_owned())
}

fn image(attributes: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
    attributes
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The same image as the SDK holds it (a `Query` page's item).
fn sdk(image: &HashMap<String, AttributeValue>) -> HashMap<String, SdkValue> {
    image
        .iter()
        .map(|(k, v)| (k.clone(), SdkValue::from(v.clone())))
        .collect()
}

fn outbox_image() -> HashMap<String, AttributeValue> {
    image(&[
        ("PK", s("USER#u1")),
        ("SK", s("OUTBOX#e1")),
        ("EntityType", s("OutboxEvent")),
        ("EventId", s("e1")),
        ("EventType", s("OrderCreated")),
        ("AggregateType", s("Order")),
        ("AggregateId", s("o1")),
        ("Sequence", n("7")),
        ("Payload", s(r#"{"orderId":"o1"}"#)),
        ("Status", s("PENDING")),
        ("CreatedAt", s("2026-11-22T10:00:00.000Z")),
        ("GSI1PK", s("OUTBOX#PENDING#3")),
        ("GSI1SK", s("EVENT#2026-11-22T10:00:00.000Z#e1")),
        ("ttl", n("1796464800")),
        ("TraceHeader", AttributeValue::Null(true)),
        ("Unrelated", AttributeValue::M(image(&[("x", n("1"))]))),
    ])
}

#[test]
fn decodes_an_outbox_image_as_serde_dynamo_does() {
    let image = outbox_image();
    let borrowed: OutboxItem = from_image(&image).unwrap();
    let owned: OutboxItem = serde_dynamo::from_item(image.clone()).unwrap();
    assert_eq!(borrowed, owned);
    assert_eq!(borrowed.sequence, Some(7));
    assert_eq!(borrowed.ttl, Some(1_796_464_800));
    assert_eq!(borrowed.trace_header, None);
}

#[test]
fn decodes_the_sdks_attribute_values_as_serde_dynamos() {
    // Given an outbox item as a `Query` page holds it (the SDK's attribute values)
    let image = outbox_image();
    let page_item = sdk(&image);

    // When it is decoded in place
    let item: OutboxItem = from_image(&page_item).unwrap();

    // Then it is the item the stream relay decodes from the same image
    assert_eq!(item, from_image::<OutboxItem>(&image).unwrap());

    // And a reason names the attribute, never its value, as for a stream image
    let mut bad = page_item;
    bad.insert("Sequence".into(), SdkValue::S(SECRET.into()));
    let reason = from_image::<OutboxItem>(&bad).unwrap_err().to_string();
    assert_eq!(
        reason,
        "attribute Sequence: invalid type: string (S), expected u64"
    );
}

#[test]
fn errors_name_the_attribute() {
    let mut bad_status = outbox_image();
    bad_status.insert("Status".into(), s("SHIPPED"));
    let err = from_image::<OutboxItem>(&bad_status)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("attribute Status: unknown variant, expected one of PENDING"),
        "{err}"
    );

    let mut wrong_type = outbox_image();
    wrong_type.insert("EventId".into(), n("12"));
    let err = from_image::<OutboxItem>(&wrong_type)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "attribute EventId: invalid type: number (N), expected a string"
    );

    let mut huge = outbox_image();
    huge.insert("Sequence".into(), s(&"x".repeat(100_000)));
    let err = from_image::<OutboxItem>(&huge).unwrap_err().to_string();
    assert_eq!(
        err,
        "attribute Sequence: invalid type: string (S), expected u64"
    );

    let mut bad_number = outbox_image();
    bad_number.insert("Sequence".into(), n("-1"));
    let err = from_image::<OutboxItem>(&bad_number)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("attribute Sequence: invalid value: number (N), expected u64"),
        "{err}"
    );

    let mut missing = outbox_image();
    missing.remove("EventType");
    let err = from_image::<OutboxItem>(&missing).unwrap_err().to_string();
    assert_eq!(err, "missing field `EventType`");
}

/// Decodes `image` with `name` set to `value`: the reason it does not decode.
fn reason_with(name: &str, value: AttributeValue) -> String {
    let mut image = outbox_image();
    image.insert(name.into(), value);
    from_image::<OutboxItem>(&image).unwrap_err().to_string()
}

const SECRET: &str = "jane.doe@example.com";

#[test]
fn a_number_attribute_holding_a_string_is_named_and_not_quoted() {
    // Given a Sequence whose number (N) holds personal data
    // When the image is decoded
    let reason = reason_with("Sequence", n(SECRET));

    // Then the reason names the attribute and its type, never its value
    assert!(!reason.contains(SECRET), "{reason}");
    assert!(
        reason.starts_with("attribute Sequence: invalid value: number (N)"),
        "{reason}"
    );
}

#[test]
fn a_number_out_of_range_is_named_and_not_quoted() {
    // Given a Sequence holding a card number, too large for it
    let card = "4111111111111111111111";

    // When the image is decoded
    let reason = reason_with("Sequence", n(card));

    // Then the reason names the attribute and its type, never its value
    assert!(!reason.contains(card), "{reason}");
    assert!(
        reason.starts_with("attribute Sequence: invalid value: number (N)"),
        "{reason}"
    );
}

#[test]
fn a_status_that_is_no_status_is_named_and_not_quoted() {
    // Given a Status holding personal data instead of one of the statuses
    // When the image is decoded
    let reason = reason_with("Status", s(SECRET));

    // Then the reason names the attribute and what it may hold, never its value
    assert!(!reason.contains(SECRET), "{reason}");
    assert!(
        reason.starts_with("attribute Status: unknown variant") && reason.contains("PENDING"),
        "{reason}"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named_and_not_quoted() {
    // Given attributes of the wrong type holding personal data: a string where a number
    // belongs, a map where a string belongs
    let map = AttributeValue::M(image(&[("email", s(SECRET))]));
    for (name, value) in [("Sequence", s(SECRET)), ("EventType", map)] {
        // When the image is decoded
        let reason = reason_with(name, value);

        // Then the reason names the attribute and its type, never its value
        assert!(!reason.contains(SECRET), "{reason}");
        assert!(
            reason.starts_with(&format!("attribute {name}: invalid type")),
            "{reason}"
        );
    }
}

#[derive(Debug, PartialEq, Deserialize)]
struct Everything {
    flag: bool,
    small: i8,
    big: u64,
    ratio: f64,
    name: String,
    absent: Option<String>,
    null: Option<u32>,
    bytes: serde_bytes_like::Bytes,
    tags: Vec<String>,
    counts: Vec<u16>,
    blobs: Vec<serde_bytes_like::Bytes>,
    list: Vec<Inner>,
    nested: Inner,
    kind: Kind,
    any: serde_json::Value,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Inner {
    id: String,
    #[serde(default)]
    n: Option<i64>,
}

#[derive(Debug, PartialEq, Deserialize)]
enum Kind {
    Small,
    Large,
}

/// Bytes through `deserialize_bytes`/`visit_bytes`, without another dependency.
mod serde_bytes_like {
    #[derive(Debug, PartialEq)]
    pub(super) struct Bytes(pub(super) Vec<u8>);

    impl<'de> serde::Deserialize<'de> for Bytes {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Bytes;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                    Ok(Bytes(v.to_vec()))
                }
                fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
                    Ok(Bytes(v))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}

#[test]
fn follows_serde_dynamos_data_model() {
    let image = image(&[
        ("flag", AttributeValue::Bool(true)),
        ("small", n("-8")),
        ("big", n("18446744073709551615")),
        ("ratio", n("0.25")),
        ("name", s("n")),
        ("null", AttributeValue::Null(true)),
        ("bytes", AttributeValue::B(vec![0, 1, 255])),
        ("tags", AttributeValue::Ss(vec!["a".into(), "b".into()])),
        (
            "counts",
            AttributeValue::Ns(vec!["1".into(), "65535".into()]),
        ),
        ("blobs", AttributeValue::Bs(vec![vec![1], vec![]])),
        (
            "list",
            AttributeValue::L(vec![AttributeValue::M(image(&[("id", s("x"))]))]),
        ),
        (
            "nested",
            AttributeValue::M(image(&[("id", s("y")), ("n", n("-3"))])),
        ),
        ("kind", s("Large")),
        (
            "any",
            AttributeValue::M(image(&[
                (
                    "l",
                    AttributeValue::L(vec![n("1"), n("-2"), n("1.5"), s("t")]),
                ),
                ("b", AttributeValue::Bool(false)),
            ])),
        ),
    ]);
    let borrowed: Everything = from_image(&image).unwrap();
    let owned: Everything = serde_dynamo::from_item(image.clone()).unwrap();
    assert_eq!(borrowed, owned);
    assert_eq!(from_image::<Everything>(&sdk(&image)).unwrap(), owned);
    assert_eq!(borrowed.big, u64::MAX);
    assert_eq!(borrowed.counts, [1, 65535]);
    assert_eq!(borrowed.nested.n, Some(-3));
    assert_eq!(borrowed.kind, Kind::Large);
    assert_eq!(
        borrowed.any,
        serde_json::json!({"l": [1, -2, 1.5, "t"], "b": false})
    );

    let mut overflow = image.clone();
    overflow.insert("small".into(), n("200"));
    let err = from_image::<Everything>(&overflow).unwrap_err().to_string();
    assert!(err.starts_with("attribute small: invalid value"), "{err}");
    assert!(serde_dynamo::from_item::<_, Everything>(overflow).is_err());
}

/// DynamoDB only sends `NULL: true`. A malformed `NULL: false` is an error where the item
/// reads the attribute, as in serde_dynamo; an attribute the item does not read is skipped
/// unexamined (serde_dynamo walks it and fails), which is why the property below draws only
/// values DynamoDB can send.
#[test]
fn a_malformed_null_is_an_error_where_it_is_read() {
    let mut image = outbox_image();
    image.insert("TraceHeader".into(), AttributeValue::Null(false));
    let err = from_image::<OutboxItem>(&image).unwrap_err().to_string();
    assert!(
        err.starts_with("attribute TraceHeader: invalid type"),
        "{err}"
    );
    assert!(serde_dynamo::from_item::<_, OutboxItem>(image).is_err());

    let mut unread = outbox_image();
    unread.insert("Unrelated".into(), AttributeValue::Null(false));
    assert!(from_image::<OutboxItem>(&unread).is_ok());
}

fn attribute() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        "[A-Z_]{0,12}".prop_map(AttributeValue::S),
        prop_oneof![Just("PENDING"), Just("PUBLISHED"), Just("DEAD_LETTERED")]
            .prop_map(|v| AttributeValue::S(v.to_owned())),
        "-?[0-9]{1,21}(\\.[0-9])?".prop_map(AttributeValue::N),
        any::<bool>().prop_map(AttributeValue::Bool),
        Just(AttributeValue::Null(true)),
        proptest::collection::vec(any::<u8>(), 0..4).prop_map(AttributeValue::B),
        proptest::collection::vec("[a-z]{0,3}", 0..3).prop_map(AttributeValue::Ss),
        Just(AttributeValue::M(HashMap::new())),
        Just(AttributeValue::L(vec![])),
    ]
}

proptest! {
    /// Any image (each attribute kept, dropped or replaced by a value of any type) decodes
    /// into an `OutboxItem` exactly when `serde_dynamo` decodes it, to the same item.
    #[test]
    fn agrees_with_serde_dynamo_on_outbox_items(
        changes in proptest::collection::vec(
            (0..16usize, proptest::option::of(attribute())), 0..6)
    ) {
        let mut image = outbox_image();
        let names: Vec<String> = image.keys().cloned().collect();
        for (index, change) in changes {
            let name = names[index % names.len()].clone();
            match change {
                Some(value) => image.insert(name, value),
                None => image.remove(&name),
            };
        }
        let borrowed = from_image::<OutboxItem>(&image);
        let from_sdk = from_image::<OutboxItem>(&sdk(&image));
        let owned = serde_dynamo::from_item::<_, OutboxItem>(image.clone());
        // The SDK's values decode as serde_dynamo's do (which attribute a reason names may
        // differ when several are wrong: each map iterates in its own order).
        match (&from_sdk, &borrowed) {
            (Ok(s), Ok(b)) => prop_assert_eq!(s, b),
            (Err(_), Err(_)) => {}
            (s, b) => prop_assert!(false, "SDK's {:?} but serde_dynamo's {:?}", s, b),
        }
        match (borrowed, owned) {
            (Ok(b), Ok(o)) => prop_assert_eq!(b, o),
            (Err(_), Err(_)) => {}
            (b, o) => prop_assert!(false, "borrowed {:?} but serde_dynamo {:?}", b, o),
        }
    }
}
