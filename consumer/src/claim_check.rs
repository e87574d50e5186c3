//! Events of any size: [`PayloadResolver`] decodes an event whose payload the writer or a relay
//! stored in S3 (a claim check, [`outbox_shared::claim_check`]) as it decodes one that carries
//! its payload, into the same [`Envelope`].
//!
//! Such an event carries, in place of `data`, `dataref` (`s3://BUCKET/KEY`), `datasize` (bytes)
//! and `datasha256` (base64), at the envelope's top level or as CloudEvent extensions. The
//! resolver reads the object with one `GetObject` (S3 checks the bytes against the checksum
//! stored with them), checks the size and SHA-256 the event names, and decodes the payload as
//! the event's data; an event with its data inline is decoded as [`crate::decode`] does, with
//! no call. The envelope it answers is the one the event would have decoded to with its data
//! inline, so the idempotency store keys and hashes a claim-checked delivery and an inline one
//! of the same event the same.
//!
//! The consumer needs `s3:GetObject` on the payload bucket's `payloads/*`, and `s3:ListBucket` on
//! the bucket to be told a gone object from a missing permission: the template's managed policy
//! `PayloadConsumerPolicy` grants both. The objects expire with the bucket's lifecycle: an event
//! read after that is [`ResolveError::Gone`], which a retry cannot bring back. S3 answers a
//! missing key with `NoSuchKey` only to a caller allowed `s3:ListBucket`; to one that is not, with
//! `AccessDenied`, which the resolver reports as S3's refusal ([`ResolveError::Read`], not
//! retryable), not as `Gone`.
//!
//! [`ResolveError::Gone`]: outbox_shared::ResolveError::Gone
//! [`ResolveError::Read`]: outbox_shared::ResolveError::Read

use outbox_shared::claim_check;
use outbox_shared::{Envelope, PayloadRef};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::debug;

use crate::received::{Data, DecodeError, parse_body, receive};

/// Decodes an event whichever way its payload came: in the event, or in S3. Cheap to clone (the
/// S3 client is).
///
/// It reads only its own payloads: objects of its bucket (the stack's `PayloadBucketName`) under
/// `payloads/` ([`claim_check::KEY_PREFIX`]). An event whose `dataref` names another bucket or
/// another key is refused by name ([`DecodeError::ForeignDataRef`]) with no call: anyone who can
/// publish to the consumer's bus or topic could otherwise make it read any object its role may
/// read. The consumer's IAM policy bounds it too (`s3:GetObject` on the payload bucket's
/// `payloads/*` only, the template's `PayloadConsumerPolicy`).
#[derive(Debug, Clone)]
pub struct PayloadResolver {
    s3: aws_sdk_s3::Client,
    bucket: String,
}

impl PayloadResolver {
    /// A resolver reading payloads with `s3` (a client from the consumer's `SdkConfig`) from
    /// `bucket` only (the payload bucket's name, `PAYLOAD_BUCKET`).
    pub fn new(s3: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            s3,
            bucket: bucket.into(),
        }
    }

    /// The bucket it reads payloads from.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Whether `reference` names one of its payloads: an object of its bucket whose key is under
    /// `payloads/`, each segment after it a name (no empty, `.` or `..` segment).
    fn check_own(&self, event_id: &str, reference: &PayloadRef) -> Result<(), DecodeError> {
        let (bucket, key) = reference
            .location()
            .map_err(|source| DecodeError::BadDataRef {
                event_id: event_id.to_owned(),
                source,
            })?;
        let own_key = key
            .strip_prefix(claim_check::KEY_PREFIX)
            .is_some_and(|rest| rest.split('/').all(|s| !matches!(s, "" | "." | "..")));
        if bucket == self.bucket && own_key {
            Ok(())
        } else {
            Err(DecodeError::ForeignDataRef {
                event_id: event_id.to_owned(),
                uri: reference.uri.clone(),
                bucket: self.bucket.clone(),
                prefix: claim_check::KEY_PREFIX,
            })
        }
    }

    /// The outbox event `event` carries, its data as `D`, read from S3 when the event carries a
    /// reference to it (`dataref`). `event` is what [`crate::decode`] takes: the envelope, a
    /// CloudEvent, or an EventBridge event whose `detail` is either.
    ///
    /// # Errors
    /// [`DecodeError`]: as [`crate::decode`] for the event itself;
    /// [`DecodeError::ForeignDataRef`] when its reference is not one of this resolver's payloads
    /// (nothing is read); [`DecodeError::Payload`] when
    /// the payload is gone (`ResolveError::Gone`), is not the one the event names (`Mismatch`),
    /// or S3 failed (`Read`, retryable as its failure is); [`DecodeError::StoredDataMalformed`]
    /// when it is not a `D`. [`DecodeError::is_retryable`] says whether a later delivery can
    /// succeed.
    pub async fn decode<D: DeserializeOwned>(
        &self,
        event: &Value,
    ) -> Result<Envelope<D>, DecodeError> {
        let received = receive(event)?;
        let Data::Stored(reference) = &received.data else {
            return received.into_inline();
        };
        let event_id = &received.metadata.event_id;
        self.check_own(event_id, reference)?;
        debug!(event_id = %event_id, uri = %reference.uri, size = reference.size,
            "reading the event's payload from S3");
        let payload = claim_check::get(&self.s3, event_id, reference).await?;
        let data = serde_json::from_slice(&payload).map_err(|source| {
            DecodeError::StoredDataMalformed {
                event_id: event_id.clone(),
                uri: reference.uri.clone(),
                source,
            }
        })?;
        Ok(Envelope {
            metadata: received.metadata,
            data,
        })
    }

    /// Like [`PayloadResolver::decode`], from the text of a message body.
    ///
    /// # Errors
    /// [`DecodeError`] when it is not JSON, or [`PayloadResolver::decode`] refuses it.
    pub async fn decode_str<D: DeserializeOwned>(
        &self,
        body: &str,
    ) -> Result<Envelope<D>, DecodeError> {
        self.decode(&parse_body(body)?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{PAYLOAD_BUCKET, inline_and_claim_checked, mock_s3_client, s3_error};
    use aws_sdk_s3::Client;
    use aws_smithy_mocks::mock;
    use outbox_shared::ResolveError;
    use outbox_shared::envelope::Encoding;
    use serde_json::json;

    #[tokio::test]
    async fn an_event_with_its_data_inline_is_decoded_with_no_call() {
        // Given an event with its data in it, and a resolver whose S3 would answer
        let (inline, _, _) =
            inline_and_claim_checked(&json!({"orderId": "o1"}), &Encoding::envelope());
        let get = mock!(Client::get_object).then_http_response(|| s3_error(500, "InternalError"));
        let resolver = PayloadResolver::new(mock_s3_client(&[&get]), PAYLOAD_BUCKET);

        // When the resolver decodes it
        let envelope: Envelope<Value> = resolver.decode(&inline).await.unwrap();

        // Then it is what decode gives, and S3 was not called
        assert_eq!(envelope, crate::decode::<Value>(&inline).unwrap());
        assert_eq!(get.num_calls(), 0);
    }

    #[tokio::test]
    async fn s3_failing_is_retryable_and_names_the_event_and_its_reference() {
        for encoding in [
            Encoding::envelope(),
            Encoding::cloudevents("com.example.orders"),
        ] {
            // Given an event whose payload is in S3, and S3 slowing down, then failing
            let (_, stored, reference) =
                inline_and_claim_checked(&json!({"orderId": "o1"}), &encoding);
            for (status, code) in [(503, "SlowDown"), (500, "InternalError")] {
                let get =
                    mock!(Client::get_object).then_http_response(move || s3_error(status, code));
                let resolver = PayloadResolver::new(mock_s3_client(&[&get]), PAYLOAD_BUCKET);

                // When the resolver decodes it
                let err = resolver.decode::<Value>(&stored).await.unwrap_err();

                // Then the error is S3's, retryable, naming the event, its reference and the code
                assert!(
                    matches!(&err, DecodeError::Payload(e) if matches!(**e, ResolveError::Read { .. })),
                    "{err:?}"
                );
                assert!(err.is_retryable(), "{code}: {err}");
                let message = err.to_string();
                for named in ["e1", reference.uri.as_str(), "GetObject", code] {
                    assert!(message.contains(named), "{named}: {message}");
                }
                assert_eq!(get.num_calls(), 1);
            }
        }
    }

    #[tokio::test]
    async fn s3_refusing_the_read_is_not_retryable() {
        // Given an event whose payload is in S3, and a consumer S3 refuses (no s3:GetObject)
        let (_, stored, _) =
            inline_and_claim_checked(&json!({"orderId": "o1"}), &Encoding::envelope());
        let get = mock!(Client::get_object).then_http_response(|| s3_error(403, "AccessDenied"));
        let resolver = PayloadResolver::new(mock_s3_client(&[&get]), PAYLOAD_BUCKET);

        // When the resolver decodes it
        let err = resolver.decode::<Value>(&stored).await.unwrap_err();

        // Then it is S3's refusal, which a later delivery does not change
        assert!(
            matches!(&err, DecodeError::Payload(e) if matches!(**e, ResolveError::Read { .. })),
            "{err:?}"
        );
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("AccessDenied"), "{err}");
    }

    #[tokio::test]
    async fn a_reference_to_another_bucket_or_key_is_refused_by_name_and_not_read() {
        for encoding in [
            Encoding::envelope(),
            Encoding::cloudevents("com.example.orders"),
        ] {
            let (_, stored, reference) =
                inline_and_claim_checked(&json!({"orderId": "o1"}), &encoding);
            let own = reference.uri.clone();
            for foreign in [
                own.replace(PAYLOAD_BUCKET, "someone-elses-bucket"),
                own.replace("/payloads/", "/dead-letters/"),
                format!("s3://{PAYLOAD_BUCKET}/secrets/key"),
                format!("s3://{PAYLOAD_BUCKET}/payloads/../secrets/key"),
                format!("s3://{PAYLOAD_BUCKET}/payloads/"),
            ] {
                // Given an event whose dataref names an object outside the resolver's payloads
                let mut event = stored.clone();
                let text = event.to_string().replace(&own, &foreign);
                event = serde_json::from_str(&text).unwrap();
                let get =
                    mock!(Client::get_object).then_http_response(|| s3_error(500, "InternalError"));
                let resolver = PayloadResolver::new(mock_s3_client(&[&get]), PAYLOAD_BUCKET);

                // When the resolver decodes it
                let err = resolver.decode::<Value>(&event).await.unwrap_err();

                // Then it is refused, naming the event, the reference and the bucket it reads,
                // not retryable, and S3 was not called
                assert!(
                    matches!(&err, DecodeError::ForeignDataRef { .. }),
                    "{foreign}: {err:?}"
                );
                assert!(!err.is_retryable());
                let message = err.to_string();
                for named in ["e1", foreign.as_str(), PAYLOAD_BUCKET, "payloads/"] {
                    assert!(message.contains(named), "{named}: {message}");
                }
                assert_eq!(get.num_calls(), 0, "{foreign}");
            }

            // And its own reference is read
            let get =
                mock!(Client::get_object).then_http_response(|| s3_error(500, "InternalError"));
            let resolver = PayloadResolver::new(mock_s3_client(&[&get]), PAYLOAD_BUCKET);
            let _ = resolver.decode::<Value>(&stored).await;
            assert_eq!(get.num_calls(), 1);
        }
    }
}
