//! What a consumer receives from the relays, whichever format they publish and wherever it went:
//! [`decode`] reads the envelope (`{"metadata", "data"}`) and a CloudEvent (structured mode,
//! JSON event format) into the same [`Envelope`], alone or as the `detail` of an EventBridge
//! event, so a consumer does not care which one the relay publishes (`EVENT_FORMAT`). The
//! idempotency store's key ([`crate::EventIdKey`]) and payload hash are then the same for one
//! event in either format. It reads the relays' own wire types ([`outbox_shared::envelope::wire`]:
//! [`EventMetadata`], [`CloudEvent`], [`DataRef`]), so what the relays write and what a consumer
//! reads cannot drift apart.
//!
//! | envelope | CloudEvent |
//! |---|---|
//! | `metadata.eventId` | `id` |
//! | `metadata.eventType` | `type` |
//! | `metadata.aggregateType` | extension `aggregatetype` |
//! | `metadata.aggregateId` | `subject` |
//! | `metadata.sequence` | extension `sequence` (a zero-padded decimal string) |
//! | `metadata.occurredAt` | `time` |
//! | `metadata.traceparent`, `metadata.tracestate` | extensions `traceparent`, `tracestate` |
//! | `data` | `data` |
//! | `dataref`, `datasize`, `datasha256` (in place of `data`) | extensions `dataref`, `datasize`, `datasha256` (in place of `data`) |
//!
//! An event whose payload was too large to travel in it carries, in place of `data`, a claim
//! check ([`outbox_shared::claim_check`]): `dataref` (`s3://BUCKET/KEY`), `datasize` (bytes) and
//! `datasha256` (base64). [`decode`] does not call S3: it refuses such an event with
//! [`DecodeError::DataInS3`], naming the reference; [`crate::PayloadResolver::decode`] reads the
//! payload from S3, checks it, and answers the same [`Envelope`] the event would have decoded to
//! with its data inline.

use outbox_shared::claim_check::{PayloadRef, RefError, ResolveError};
use outbox_shared::envelope::{CLOUDEVENTS_SPEC_VERSION, CloudEvent, DATAREF, DataRef};
use outbox_shared::{Envelope, EventMetadata};
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

/// Why an event could not be decoded. Each variant names what is wrong, never a value of the
/// event; [`DecodeError::is_retryable`] says whether delivering the event again can help.
///
/// | variant | returned by | retryable |
/// |---|---|---|
/// | `NotAnEvent`, `Malformed`, `SpecVersion`, `Sequence`, `DataAndDataRef`, `BadDataRef` | both | no: poison |
/// | `DataInS3` | [`decode`] | no: decode it with [`crate::PayloadResolver`] |
/// | `Payload` (`Gone`, `Mismatch`, `Reference`) | [`crate::PayloadResolver`] | no |
/// | `Payload` (`Read`: S3 failed) | [`crate::PayloadResolver`] | as S3's failure is (throttling, timeouts, 5xx: yes; access denied: no) |
/// | `StoredDataMalformed` | [`crate::PayloadResolver`] | no: poison |
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "not an outbox event: neither an envelope (metadata, data) nor a CloudEvent (specversion)"
    )]
    NotAnEvent,
    /// The event, or its data in it, is not what the consumer expects.
    #[error("malformed {format}: {source}")]
    Malformed {
        format: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("CloudEvent of specversion {0}: only 1.0 is read")]
    SpecVersion(String),
    #[error("CloudEvent's sequence is not a decimal number")]
    Sequence,
    /// The event's data is in S3 (a claim check): [`decode`] does not call S3.
    #[error(
        "event {event_id}: its data is not in the event but in S3 at {uri} (dataref): decode \
         it with outbox_consumer::PayloadResolver, which reads the payload and checks its size \
         and SHA-256"
    )]
    DataInS3 { event_id: String, uri: String },
    /// The event carries both `data` and `dataref`: which one is its data is not known.
    #[error(
        "event {event_id}: has both data and dataref; an event carries its data or the \
         reference to it, not both"
    )]
    DataAndDataRef { event_id: String },
    /// `dataref`, `datasize` and `datasha256` do not say where or what the payload is.
    #[error("event {event_id}: dataref: {source}")]
    BadDataRef {
        event_id: String,
        #[source]
        source: RefError,
    },
    /// `dataref` names an object outside the consumer's own payloads (another bucket than its
    /// [`crate::PayloadResolver`]'s, or a key outside `payloads/`): refused without reading it,
    /// so whoever can publish an event cannot make a consumer read (or measure) another object
    /// its role may read.
    #[error(
        "event {event_id}: dataref {uri} is not a payload of bucket {bucket} (s3://{bucket}/{prefix}…): \
         refused, not read"
    )]
    ForeignDataRef {
        event_id: String,
        uri: String,
        bucket: String,
        prefix: &'static str,
    },
    /// The referenced payload could not be read: gone (past the payload bucket's lifecycle), not
    /// the payload the event names, or S3 failed.
    /// (Boxed: it is the largest variant, and every other keeps the error small.)
    #[error(transparent)]
    Payload(Box<ResolveError>),
    /// The payload read from S3 (its size and SHA-256 right) is not the data the consumer
    /// expects.
    #[error("event {event_id}: the payload read from {uri} is malformed: {source}")]
    StoredDataMalformed {
        event_id: String,
        uri: String,
        #[source]
        source: serde_json::Error,
    },
}

impl From<ResolveError> for DecodeError {
    fn from(error: ResolveError) -> Self {
        Self::Payload(Box::new(error))
    }
}

impl DecodeError {
    /// Whether delivering the event again later may succeed: only when S3 failed transiently
    /// while its payload was read. Everything else is the event itself (poison), or its payload
    /// gone or not the one named, which a retry cannot bring back.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Payload(e) if e.is_retryable())
    }
}

/// Where a received event's data is.
#[derive(Debug)]
pub(crate) enum Data<'a> {
    /// In the event: its `data` (`None`: the event has none).
    Inline(Option<&'a Value>),
    /// In S3: the reference the event carries in place of `data`.
    Stored(PayloadRef),
}

/// An event as received: its metadata, and where its data is (not read yet).
#[derive(Debug)]
pub(crate) struct Received<'a> {
    pub(crate) metadata: EventMetadata,
    pub(crate) data: Data<'a>,
    format: &'static str,
}

impl Received<'_> {
    /// The envelope with its data as `D`, when the event carries it.
    ///
    /// # Errors
    /// [`DecodeError::DataInS3`] when its data is in S3; [`DecodeError::Malformed`] when it is
    /// not a `D`.
    pub(crate) fn into_inline<D: DeserializeOwned>(self) -> Result<Envelope<D>, DecodeError> {
        let malformed = |source| DecodeError::Malformed {
            format: self.format,
            source,
        };
        let data = match self.data {
            Data::Inline(Some(data)) => D::deserialize(data).map_err(malformed)?,
            // CloudEvents makes data optional: `D` says whether null is one. The envelope has it.
            Data::Inline(None) if self.format == CLOUDEVENT => {
                D::deserialize(&Value::Null).map_err(malformed)?
            }
            Data::Inline(None) => return Err(malformed(serde::de::Error::missing_field("data"))),
            Data::Stored(reference) => {
                return Err(DecodeError::DataInS3 {
                    event_id: self.metadata.event_id,
                    uri: reference.uri,
                });
            }
        };
        Ok(Envelope {
            metadata: self.metadata,
            data,
        })
    }
}

const ENVELOPE: &str = "envelope";
const CLOUDEVENT: &str = "CloudEvent";

/// The outbox event `event` carries, its data as `D`: `event` is the envelope, a CloudEvent, or
/// an EventBridge event (`{"detail-type", "detail", …}`, as the classic bus and the Custom Event
/// Bus's `PutEvents` deliver it) whose `detail` is either.
///
/// An event whose data is in S3 (`dataref`) is refused ([`DecodeError::DataInS3`]): read it
/// with [`crate::PayloadResolver::decode`], which takes either kind.
///
/// # Errors
/// [`DecodeError`] when it is none of these, its data is not a `D`, or its data is in S3.
pub fn decode<D: DeserializeOwned>(event: &Value) -> Result<Envelope<D>, DecodeError> {
    receive(event)?.into_inline()
}

/// Like [`decode`], from the text of a message body.
///
/// # Errors
/// [`DecodeError`] when it is not JSON, or [`decode`] refuses it.
pub fn decode_str<D: DeserializeOwned>(body: &str) -> Result<Envelope<D>, DecodeError> {
    decode(&parse_body(body)?)
}

/// The JSON of a message body.
pub(crate) fn parse_body(body: &str) -> Result<Value, DecodeError> {
    serde_json::from_str(body).map_err(|source| DecodeError::Malformed {
        format: "message body",
        source,
    })
}

/// The event `event` carries (see [`decode`]), its data not read yet.
pub(crate) fn receive(event: &Value) -> Result<Received<'_>, DecodeError> {
    let event = match event.get("detail") {
        Some(detail) if event.get("detail-type").is_some() => detail,
        _ => event,
    };
    let (metadata, format) = if event.get("specversion").is_some() {
        (cloudevent_metadata(event)?, CLOUDEVENT)
    } else if let Some(metadata) = event.get("metadata") {
        let metadata =
            EventMetadata::deserialize(metadata).map_err(|source| DecodeError::Malformed {
                format: ENVELOPE,
                source,
            })?;
        (metadata, ENVELOPE)
    } else {
        return Err(DecodeError::NotAnEvent);
    };
    let data = match (event.get("data"), event.get(DATAREF)) {
        (data, None) => Data::Inline(data),
        (Some(_), Some(_)) => {
            return Err(DecodeError::DataAndDataRef {
                event_id: metadata.event_id,
            });
        }
        (None, Some(_)) => Data::Stored(data_ref(event, &metadata.event_id)?),
    };
    Ok(Received {
        metadata,
        data,
        format,
    })
}

/// The reference an event carries in place of its data, checked (another client may have
/// written it).
fn data_ref(event: &Value, event_id: &str) -> Result<PayloadRef, DecodeError> {
    let reference: PayloadRef = DataRef::deserialize(event)
        .map_err(|source| DecodeError::Malformed {
            format: "claim check (dataref, datasize, datasha256)",
            source,
        })?
        .into();
    reference
        .validate()
        .map_err(|source| DecodeError::BadDataRef {
            event_id: event_id.to_owned(),
            source,
        })?;
    Ok(reference)
}

fn cloudevent_metadata(event: &Value) -> Result<EventMetadata, DecodeError> {
    // Its data is read apart, not copied.
    let event =
        CloudEvent::<IgnoredAny>::deserialize(event).map_err(|source| DecodeError::Malformed {
            format: CLOUDEVENT,
            source,
        })?;
    if event.specversion != CLOUDEVENTS_SPEC_VERSION {
        return Err(DecodeError::SpecVersion(event.specversion));
    }
    let sequence = event
        .sequence
        .map(|s| s.parse::<u64>().map_err(|_| DecodeError::Sequence))
        .transpose()?;
    Ok(EventMetadata {
        event_id: event.id,
        event_type: event.event_type,
        aggregate_type: event.aggregatetype,
        aggregate_id: event.subject,
        sequence,
        occurred_at: event.time.unwrap_or_default(),
        traceparent: event.traceparent,
        tracestate: event.tracestate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn envelope() -> Value {
        json!({
            "metadata": {
                "eventId": "e1", "eventType": "OrderCreated", "aggregateType": "Order",
                "aggregateId": "o1", "sequence": 7, "occurredAt": "2026-11-22T10:00:00.000Z",
                "traceparent": TRACEPARENT, "tracestate": "rojo=1"
            },
            "data": {"orderId": "o1"}
        })
    }

    fn cloudevent() -> Value {
        json!({
            "specversion": "1.0", "id": "e1", "source": "com.example.orders",
            "type": "OrderCreated", "subject": "o1", "time": "2026-11-22T10:00:00.000Z",
            "datacontenttype": "application/json", "data": {"orderId": "o1"},
            "sequence": "00000000000000000007", "partitionkey": "o1", "aggregatetype": "Order",
            "traceparent": TRACEPARENT, "tracestate": "rojo=1"
        })
    }

    fn in_eventbridge_event(detail: Value) -> Value {
        json!({"version": "0", "id": "eb-1", "detail-type": "OrderCreated",
               "source": "com.example.orders", "detail": detail})
    }

    #[test]
    fn one_event_in_either_format_and_either_wrapping_decodes_to_the_same_envelope() {
        // Given one event as the envelope and as a CloudEvent, alone and as an EventBridge
        // event's detail
        let forms = [
            envelope(),
            cloudevent(),
            in_eventbridge_event(envelope()),
            in_eventbridge_event(cloudevent()),
        ];

        // When each is decoded
        let decoded: Vec<Envelope<Value>> = forms.iter().map(|f| decode(f).unwrap()).collect();

        // Then all are the same envelope, trace context included, and so are their keys and
        // payload hashes in the idempotency store
        let expected: Envelope<Value> = serde_json::from_value(envelope()).unwrap();
        for envelope in &decoded {
            assert_eq!(envelope, &expected);
        }
        let hashes: Vec<String> = decoded
            .iter()
            .map(|e| crate::idempotency::payload_hash(e).unwrap())
            .collect();
        assert!(hashes.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(expected.metadata.traceparent.as_deref(), Some(TRACEPARENT));
    }

    #[test]
    fn what_is_not_an_outbox_event_is_refused_naming_why() {
        assert!(matches!(
            decode::<Value>(&json!({"hello": 1})),
            Err(DecodeError::NotAnEvent)
        ));
        let mut later = cloudevent();
        later["specversion"] = json!("2.0");
        assert!(matches!(
            decode::<Value>(&later),
            Err(DecodeError::SpecVersion(_))
        ));
        let mut unordered = cloudevent();
        unordered["sequence"] = json!("first");
        assert!(matches!(
            decode::<Value>(&unordered),
            Err(DecodeError::Sequence)
        ));
        #[derive(Debug, Deserialize)]
        struct Order {
            #[serde(rename = "amountCents")]
            _amount: u64,
        }
        assert!(matches!(
            decode::<Order>(&cloudevent()),
            Err(DecodeError::Malformed {
                format: "CloudEvent",
                ..
            })
        ));
        assert!(decode_str::<Value>("not json").is_err());
    }

    #[test]
    fn decode_refuses_an_event_whose_data_is_in_s3_naming_its_reference_and_the_resolver() {
        use outbox_shared::envelope::Encoding;
        for encoding in [
            Encoding::envelope(),
            Encoding::cloudevents("com.example.orders"),
        ] {
            // Given an event whose payload is in S3, as the relays write it, alone and as an
            // EventBridge event's detail
            let (_, stored, reference) =
                crate::test_support::inline_and_claim_checked(&json!({"orderId": "o1"}), &encoding);
            for event in [stored.clone(), in_eventbridge_event(stored)] {
                // When it is decoded without S3
                let err = decode::<Value>(&event).unwrap_err();

                // Then the error names the event, its reference and the call that reads it
                assert!(
                    matches!(&err, DecodeError::DataInS3 { event_id, uri }
                        if event_id == "e1" && *uri == reference.uri),
                    "{err:?}"
                );
                let message = err.to_string();
                let uri = format!("s3://{}/payloads/e1", crate::test_support::PAYLOAD_BUCKET);
                assert!(message.contains(&uri), "{message}");
                assert!(message.contains("PayloadResolver"), "{message}");
                assert!(!err.is_retryable());
            }
        }
    }

    #[test]
    fn a_claim_check_that_is_ambiguous_or_does_not_say_where_or_what_is_poison_named() {
        let (_, stored, _) = crate::test_support::inline_and_claim_checked(
            &json!({"orderId": "o1"}),
            &outbox_shared::envelope::Encoding::envelope(),
        );
        // Both the data and a reference to it
        let mut both = stored.clone();
        both["data"] = json!({"orderId": "o1"});
        let err = decode::<Value>(&both).unwrap_err();
        assert!(matches!(err, DecodeError::DataAndDataRef { .. }), "{err:?}");
        assert!(err.to_string().contains("both data and dataref"), "{err}");
        // A reference that is not an s3:// URI, or without its checksum
        let mut elsewhere = stored.clone();
        elsewhere["dataref"] = json!("https://example.com/payloads/e1");
        let err = decode::<Value>(&elsewhere).unwrap_err();
        assert!(matches!(err, DecodeError::BadDataRef { .. }), "{err:?}");
        assert!(
            err.to_string().contains("not an s3://BUCKET/KEY URI"),
            "{err}"
        );
        let mut unchecked = stored;
        unchecked.as_object_mut().unwrap().remove("datasha256");
        let err = decode::<Value>(&unchecked).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("malformed claim check (dataref, datasize, datasha256)"),
            "{err}"
        );
        // And an envelope with neither is still the envelope missing its data
        let mut none = envelope();
        none.as_object_mut().unwrap().remove("data");
        let err = decode::<Value>(&none).unwrap_err();
        assert_eq!(err.to_string(), "malformed envelope: missing field `data`");
    }
}
