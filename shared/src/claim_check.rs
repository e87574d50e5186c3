//! The claim check: a payload too large to travel in its event is stored in S3, and the event
//! carries a reference to it instead of its `data`.
//!
//! - The object's key derives from the event id ([`object_key`]), so whoever stores a payload
//!   again (a re-publish, another relay, the writer then a relay) finds it already there: the
//!   store is a conditional `PutObject` (`If-None-Match: *`) that writes nothing when the object
//!   exists, and S3 verifies the bytes against the `ChecksumSHA256` sent with them. An object
//!   found there is looked at before it is referenced ([`check`]): an event id may be chosen by a
//!   caller or another client, and a failed transaction leaves an orphan under its event's key,
//!   so the object found may hold other bytes ([`StoreError::Taken`]).
//! - The bucket's lifecycle counts an object's age from when it was written. An object found
//!   older than [`REFRESH_AFTER`] when its event is published, and the object of a pending event
//!   whose item's `ttl` the poller pushes out, is copied onto itself ([`refresh`]), so its
//!   lifecycle counts again from then: a payload outlives its event's wait.
//! - The reference ([`PayloadRef`]) is the object's URI `s3://BUCKET/KEY`, the payload's size in
//!   bytes, and its SHA-256 (base64, as S3's `ChecksumSHA256` is). In an event it is the
//!   CloudEvents claim-check extension `dataref` with `datasize` and `datasha256`, in place of
//!   `data`; in an outbox item, the map attribute `PayloadRef` (`Uri`, `Size`, `Sha256`) in place
//!   of `Payload`.
//! - Reading it back ([`PayloadStore::get`]) checks the size and the SHA-256, and says so clearly
//!   when the object is gone (past the bucket's lifecycle).

use std::fmt;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, MetadataDirective};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::SdkFailure;

/// Where the payloads are in their bucket: every claim-check object's key starts so, and the
/// bucket's lifecycle rule expires what is under it.
pub const KEY_PREFIX: &str = "payloads/";

/// The URI scheme of a reference.
pub const URI_SCHEME: &str = "s3://";

/// The event id's characters a key takes as they are; an id with any other (another client may
/// write anything) is keyed by its SHA-256 instead, so the key and its URI need no escaping.
fn key_safe(event_id: &str) -> bool {
    !event_id.is_empty()
        && event_id.len() <= 200
        && event_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && event_id != "."
        && event_id != ".."
}

/// The key of event `event_id`'s payload: `payloads/{event_id}`, or, for an id with characters a
/// URI would have to escape, `payloads/sha256-{hex of the id}`. One event, one key, whoever stores
/// it.
pub fn object_key(event_id: &str) -> String {
    format!("{KEY_PREFIX}{}", key_segment(event_id))
}

/// What stands for `id` in a key: the id itself, or, with characters a URI would have to escape,
/// `sha256-{hex of the id}` (the payload's [`object_key`], a dead letter's record).
pub fn key_segment(id: &str) -> String {
    if key_safe(id) {
        id.to_owned()
    } else {
        let digest = Sha256::digest(id.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256-{hex}")
    }
}

/// The URI of object `key` in `bucket`: `s3://BUCKET/KEY`.
pub fn uri(bucket: &str, key: &str) -> String {
    format!("{URI_SCHEME}{bucket}/{key}")
}

/// Checks `bucket` against S3's rules for a general purpose bucket's name (3 to 63 lowercase
/// letters, digits, dots and hyphens, starting and ending with a letter or digit), so a relay
/// refuses at start a name no call could use.
///
/// # Errors
/// What is wrong with the name (the name is configuration, not data: it is quoted).
pub fn check_bucket_name(bucket: &str) -> Result<(), String> {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !(3..=63).contains(&bucket.len()) {
        return Err(format!(
            "{bucket:?} is {} characters; a bucket name has 3 to 63",
            bucket.len()
        ));
    }
    if !bucket.bytes().all(allowed) {
        return Err(format!(
            "{bucket:?} is not a bucket name: only lowercase letters, digits, dots and hyphens \
             (a bucket's name, not its ARN or an s3:// URI)"
        ));
    }
    if !edge(bucket.as_bytes().first()) || !edge(bucket.as_bytes().last()) {
        return Err(format!(
            "{bucket:?} is not a bucket name: it starts and ends with a letter or digit"
        ));
    }
    Ok(())
}

/// The SHA-256 of `bytes`, base64 (S3's `ChecksumSHA256`).
pub fn sha256_base64(bytes: &[u8]) -> String {
    aws_smithy_types::base64::encode(Sha256::digest(bytes))
}

/// Where a payload is and what it is: enough to fetch it and check it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadRef {
    /// `s3://BUCKET/KEY`.
    #[serde(rename = "Uri")]
    pub uri: String,
    /// The payload's length in bytes.
    #[serde(rename = "Size")]
    pub size: u64,
    /// The payload's SHA-256, base64.
    #[serde(rename = "Sha256")]
    pub sha256: String,
}

impl PayloadRef {
    /// The reference to `payload` stored as `key` in `bucket`.
    pub fn of(bucket: &str, key: &str, payload: &[u8]) -> Self {
        Self {
            uri: uri(bucket, key),
            size: payload.len() as u64,
            sha256: sha256_base64(payload),
        }
    }

    /// The bucket and key of its URI.
    ///
    /// # Errors
    /// [`RefError::Uri`] when the URI is not `s3://BUCKET/KEY`.
    pub fn location(&self) -> Result<(&str, &str), RefError> {
        self.uri
            .strip_prefix(URI_SCHEME)
            .and_then(|rest| rest.split_once('/'))
            .filter(|(bucket, key)| !bucket.is_empty() && !key.is_empty())
            .ok_or_else(|| RefError::Uri(self.uri.clone()))
    }

    /// Checks the reference itself (another client may have written it): an `s3://` URI and a
    /// SHA-256 of 32 bytes.
    ///
    /// # Errors
    /// [`RefError`] naming what is wrong.
    pub fn validate(&self) -> Result<(), RefError> {
        self.location()?;
        match aws_smithy_types::base64::decode(&self.sha256) {
            Ok(digest) if digest.len() == 32 => Ok(()),
            _ => Err(RefError::Sha256(self.sha256.clone())),
        }
    }
}

impl fmt::Display for PayloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes)", self.uri, self.size)
    }
}

/// A reference that does not say where or what its payload is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("payload reference {0:?} is not an s3://BUCKET/KEY URI")]
    Uri(String),
    #[error("payload reference's SHA-256 {0:?} is not 32 bytes in base64")]
    Sha256(String),
}

/// Why a referenced payload could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Reference(#[from] RefError),
    /// The object is not there: past the bucket's lifecycle, or deleted.
    #[error(
        "the payload of event {event_id} is gone from {uri}: its object expired (the payload \
         bucket's lifecycle) or was deleted; the event cannot be processed from its reference"
    )]
    Gone { event_id: String, uri: String },
    /// The object is not the payload the event names.
    #[error(
        "the payload of event {event_id} at {uri} is {found_size} bytes with SHA-256 \
         {found_sha256}; the event says {size} bytes with SHA-256 {sha256}"
    )]
    Mismatch {
        event_id: String,
        uri: String,
        size: u64,
        sha256: String,
        found_size: u64,
        found_sha256: String,
    },
    /// S3 failed (retryable or not, as `SdkFailure::class` says).
    #[error("reading the payload of event {event_id} from {uri}: {source}")]
    Read {
        event_id: String,
        uri: String,
        #[source]
        source: SdkFailure,
    },
}

impl ResolveError {
    /// Whether trying again later may succeed (S3 failed transiently); a payload gone or not the
    /// one named never comes back.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Read { source, .. } if source.is_retryable())
    }
}

/// Why a payload was not stored under its event's key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// S3 failed (retryable or not, as `SdkFailure::class` says).
    #[error(transparent)]
    Failed(#[from] SdkFailure),
    /// The key already holds another payload: the event id was given to another payload (a
    /// caller's or another client's id used twice, or a write whose transaction failed left it).
    /// A reference to it would name bytes the object does not have. Boxed: the error stays small
    /// on every path that returns it.
    #[error(transparent)]
    Taken(Box<KeyTaken>),
}

/// A payload's key found holding another payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{uri}, the key of event {event_id}'s payload, already holds another payload \
     ({found_size} bytes with SHA-256 {found_sha256}; this one is {size} bytes with SHA-256 \
     {sha256}): the event id was given to another payload (used twice, or left by a write whose \
     transaction failed)"
)]
pub struct KeyTaken {
    pub event_id: String,
    pub uri: String,
    pub size: u64,
    pub sha256: String,
    pub found_size: u64,
    pub found_sha256: String,
}

impl StoreError {
    /// Whether trying again later may succeed: S3 failed transiently. A key holding another
    /// payload keeps it.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Failed(failure) if failure.is_retryable())
    }
}

/// The payload bucket: stores payloads under their event's key and reads them back checked.
#[derive(Debug, Clone)]
pub struct PayloadStore {
    client: aws_sdk_s3::Client,
    bucket: String,
}

/// What storing a payload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The object was written.
    Written,
    /// An object holding this payload was already under the key (stored before for the same
    /// event): nothing written.
    AlreadyThere,
}

impl PayloadStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The S3 client it calls.
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    /// The reference event `event_id`'s `payload` gets in this bucket (nothing is called).
    pub fn reference(&self, event_id: &str, payload: &[u8]) -> PayloadRef {
        PayloadRef::of(&self.bucket, &object_key(event_id), payload)
    }

    /// Stores event `event_id`'s `payload` under its key, unless an object is already there: one
    /// conditional `PutObject` with the payload's `ChecksumSHA256`, which S3 verifies. An object
    /// already there is checked to hold this payload ([`check`]), and copied onto itself when
    /// older than [`REFRESH_AFTER`] ([`refresh`]), so it is not referenced with its old age.
    ///
    /// # Errors
    /// [`StoreError::Failed`] when S3 failed; [`StoreError::Taken`] when the key holds another
    /// payload. Nothing may be published with the reference then.
    pub async fn put(
        &self,
        event_id: &str,
        payload: &[u8],
    ) -> Result<(PayloadRef, Stored), StoreError> {
        match self.write(&object_key(event_id), payload, true).await {
            Ok(reference) => Ok((reference, Stored::Written)),
            // 412: an object is under the event's key; it is referenced only once known to hold
            // this payload.
            Err(failure) if failure.code.as_deref() == Some(PRECONDITION_FAILED) => {
                let reference = self.reference(event_id, payload);
                match keep(&self.client, event_id, &reference, SystemTime::now()).await {
                    Ok(_) => Ok((reference, Stored::AlreadyThere)),
                    Err(ResolveError::Mismatch {
                        event_id,
                        uri,
                        size,
                        sha256,
                        found_size,
                        found_sha256,
                    }) => Err(StoreError::Taken(Box::new(KeyTaken {
                        event_id,
                        uri,
                        size,
                        sha256,
                        found_size,
                        found_sha256,
                    }))),
                    Err(ResolveError::Read { source, .. }) => Err(StoreError::Failed(source)),
                    // Deleted between the two calls: the next attempt writes it.
                    Err(other) => Err(StoreError::Failed(SdkFailure::incomplete(
                        "HeadObject",
                        other.to_string(),
                    ))),
                }
            }
            Err(failure) => Err(StoreError::Failed(failure)),
        }
    }

    /// Writes `bytes` as the object `key`, whatever is there: one `PutObject` with their
    /// `ChecksumSHA256`, which S3 verifies. For objects whose key is new each time (a dead
    /// letter's record); a payload is [`put`](Self::put).
    ///
    /// # Errors
    /// [`SdkFailure`] when S3 failed.
    pub async fn put_object(&self, key: &str, bytes: &[u8]) -> Result<PayloadRef, SdkFailure> {
        self.write(key, bytes, false).await
    }

    /// One `PutObject` of `bytes` as `key` with their checksum; only when no object is there
    /// when `if_absent`.
    async fn write(
        &self,
        key: &str,
        bytes: &[u8],
        if_absent: bool,
    ) -> Result<PayloadRef, SdkFailure> {
        let reference = PayloadRef::of(&self.bucket, key, bytes);
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .set_if_none_match(if_absent.then(|| "*".to_owned()))
            // The algorithm names the checksum S3 verifies and keeps with the object (returned
            // by a read with `ChecksumMode::Enabled`); the value is the one computed here.
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .checksum_sha256(&reference.sha256)
            .content_type("application/json")
            .content_length(bytes.len() as i64)
            .body(ByteStream::from(bytes.to_vec()));
        request
            .send()
            .await
            .map(|_| reference)
            .map_err(|err| SdkFailure::new("PutObject", err))
    }

    /// The payload `reference` names, checked against its size and SHA-256 (S3 checks the bytes
    /// against the `ChecksumSHA256` stored with them too).
    ///
    /// # Errors
    /// [`ResolveError`]: a reference that is not an `s3://` URI, an object gone, one that is not
    /// the payload named, or an S3 failure.
    pub async fn get(
        &self,
        event_id: &str,
        reference: &PayloadRef,
    ) -> Result<Vec<u8>, ResolveError> {
        get(&self.client, event_id, reference).await
    }
}

/// S3's code for a conditional write refused: `If-None-Match: *` on an existing key.
pub const PRECONDITION_FAILED: &str = "PreconditionFailed";

/// The payload `reference` names, read with `client` from whatever bucket it names, and checked.
///
/// # Errors
/// As [`PayloadStore::get`].
pub async fn get(
    client: &aws_sdk_s3::Client,
    event_id: &str,
    reference: &PayloadRef,
) -> Result<Vec<u8>, ResolveError> {
    reference.validate()?;
    let (bucket, key) = reference.location()?;
    let read_failed = |source| ResolveError::Read {
        event_id: event_id.to_owned(),
        uri: reference.uri.clone(),
        source,
    };
    let object = match client
        .get_object()
        .bucket(bucket)
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
    {
        Ok(object) => object,
        Err(err) => {
            return Err(read_error(
                event_id,
                reference,
                SdkFailure::new("GetObject", err),
            ));
        }
    };
    let bytes = object
        .body
        .collect()
        .await
        .map_err(|err| {
            read_failed(SdkFailure::incomplete(
                "GetObject",
                format!("reading the object's body: {err}"),
            ))
        })?
        .into_bytes()
        .to_vec();
    let found_sha256 = sha256_base64(&bytes);
    if bytes.len() as u64 != reference.size || found_sha256 != reference.sha256 {
        return Err(ResolveError::Mismatch {
            event_id: event_id.to_owned(),
            uri: reference.uri.clone(),
            size: reference.size,
            sha256: reference.sha256.clone(),
            found_size: bytes.len() as u64,
            found_sha256,
        });
    }
    Ok(bytes)
}

/// How old an object may be when its event is published and it is referenced: an older one is
/// copied onto itself first ([`keep`]), so its consumers get at least `PayloadRetentionDays`
/// less this to read it.
pub const REFRESH_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// An object found holding the payload its reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// When S3 last wrote it: the bucket's lifecycle counts its age from then.
    pub last_modified: Option<SystemTime>,
}

impl Held {
    /// Its age at `now` (none known: as old as can be).
    pub fn age(&self, now: SystemTime) -> Duration {
        self.last_modified
            .and_then(|written| now.duration_since(written).ok())
            .unwrap_or(if self.last_modified.is_some() {
                Duration::ZERO
            } else {
                Duration::MAX
            })
    }
}

/// Whether the object `reference` names holds its payload: one `HeadObject` with
/// `ChecksumMode::Enabled`, comparing the size and the SHA-256 S3 keeps with the object; an
/// object stored without a whole-object SHA-256 (by another client) is read and checked
/// ([`get`]).
///
/// # Errors
/// [`ResolveError`]: a reference that is not an `s3://` URI, an object gone, one that holds
/// another payload, or an S3 failure.
pub async fn check(
    client: &aws_sdk_s3::Client,
    event_id: &str,
    reference: &PayloadRef,
) -> Result<Held, ResolveError> {
    reference.validate()?;
    let (bucket, key) = reference.location()?;
    let head = match client
        .head_object()
        .bucket(bucket)
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
    {
        Ok(head) => head,
        Err(err) => {
            return Err(read_error(
                event_id,
                reference,
                SdkFailure::new("HeadObject", err),
            ));
        }
    };
    let held = Held {
        last_modified: head
            .last_modified()
            .and_then(|written| SystemTime::try_from(*written).ok()),
    };
    let found_size = head.content_length().and_then(|n| u64::try_from(n).ok());
    match head.checksum_sha256() {
        // A multipart object's checksum is of its parts (`…-N`), not of the payload.
        Some(found) if !found.contains('-') => {
            if found_size != Some(reference.size) || found != reference.sha256 {
                return Err(ResolveError::Mismatch {
                    event_id: event_id.to_owned(),
                    uri: reference.uri.clone(),
                    size: reference.size,
                    sha256: reference.sha256.clone(),
                    found_size: found_size.unwrap_or_default(),
                    found_sha256: found.to_owned(),
                });
            }
        }
        _ => {
            get(client, event_id, reference).await?;
        }
    }
    Ok(held)
}

/// Copies the object `reference` names onto itself (`CopyObject`, its metadata replaced by the
/// same content type, its SHA-256 computed again by S3), so the bucket's lifecycle counts its
/// age from now. In the versioned bucket the old version becomes noncurrent, and the lifecycle
/// removes it a day later.
///
/// # Errors
/// [`ResolveError`]: a reference that is not an `s3://` URI, an object gone, or an S3 failure.
pub async fn refresh(
    client: &aws_sdk_s3::Client,
    event_id: &str,
    reference: &PayloadRef,
) -> Result<(), ResolveError> {
    let (bucket, key) = reference.location()?;
    client
        .copy_object()
        .bucket(bucket)
        .key(key)
        // Keys are key-safe ([`object_key`]): nothing in them to escape.
        .copy_source(format!("{bucket}/{key}"))
        .metadata_directive(MetadataDirective::Replace)
        .content_type("application/json")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| read_error(event_id, reference, SdkFailure::new("CopyObject", err)))
}

/// Checks that the object `reference` names holds its payload ([`check`]) and, when it is older
/// than [`REFRESH_AFTER`] at `now`, copies it onto itself ([`refresh`]): whether it was.
///
/// # Errors
/// As [`check`] and [`refresh`].
pub async fn keep(
    client: &aws_sdk_s3::Client,
    event_id: &str,
    reference: &PayloadRef,
    now: SystemTime,
) -> Result<bool, ResolveError> {
    let held = check(client, event_id, reference).await?;
    if held.age(now) <= REFRESH_AFTER {
        return Ok(false);
    }
    refresh(client, event_id, reference).await?;
    Ok(true)
}

/// The error of a failed call on the object `reference` names: gone when S3 says there is no
/// such key, else the failure.
fn read_error(event_id: &str, reference: &PayloadRef, failure: SdkFailure) -> ResolveError {
    match failure.code.as_deref() {
        Some("NoSuchKey" | "NotFound") => ResolveError::Gone {
            event_id: event_id.to_owned(),
            uri: reference.uri.clone(),
        },
        _ => ResolveError::Read {
            event_id: event_id.to_owned(),
            uri: reference.uri.clone(),
            source: failure,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_name_is_checked_as_s3_names_them() {
        assert_eq!(check_bucket_name("orders-payloads.v2"), Ok(()));
        for bad in [
            "ab",
            "Orders",
            "arn:aws:s3:::orders",
            "s3://orders",
            "-orders",
            "orders-",
        ] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_is_the_event_id_under_the_prefix() {
        assert_eq!(
            object_key("0193a5e0-7c1a-7cc3-9f00-0a1b2c3d4e5f"),
            "payloads/0193a5e0-7c1a-7cc3-9f00-0a1b2c3d4e5f"
        );
        assert_eq!(object_key("01JD0ABCDEF"), "payloads/01JD0ABCDEF");
    }

    #[test]
    fn an_id_a_uri_would_escape_is_keyed_by_its_sha256() {
        let key = object_key("order 1/../x?");
        assert!(key.starts_with("payloads/sha256-"), "{key}");
        assert_eq!(key.len(), "payloads/sha256-".len() + 64);
        assert_eq!(key, object_key("order 1/../x?"), "one id, one key");
        assert_ne!(key, object_key("order 2"));
        assert!(object_key("..").starts_with("payloads/sha256-"));
        assert!(object_key("").starts_with("payloads/sha256-"));
    }

    #[test]
    fn a_reference_names_its_bucket_key_size_and_checksum() {
        let reference = PayloadRef::of("orders-payloads", "payloads/e1", b"{\"a\":1}");
        assert_eq!(reference.uri, "s3://orders-payloads/payloads/e1");
        assert_eq!(reference.size, 7);
        assert_eq!(
            reference.location().unwrap(),
            ("orders-payloads", "payloads/e1")
        );
        // sha256('{"a":1}') in base64, as `openssl dgst -sha256 -binary | base64` prints it.
        assert_eq!(
            reference.sha256,
            "AVq9f1zFei3ZS3WQ8ErYCEJzkF7jPsXOvq5iJ2qX+GI="
        );
        reference.validate().unwrap();
    }

    #[test]
    fn a_reference_another_client_wrote_wrong_is_refused_by_name() {
        let mut reference = PayloadRef::of("b", "payloads/e1", b"{}");
        reference.uri = "https://b.s3.amazonaws.com/payloads/e1".into();
        assert!(matches!(reference.validate(), Err(RefError::Uri(_))));
        reference.uri = "s3://b/".into();
        assert!(matches!(reference.validate(), Err(RefError::Uri(_))));
        let mut reference = PayloadRef::of("b", "payloads/e1", b"{}");
        reference.sha256 = "abc".into();
        assert!(matches!(reference.validate(), Err(RefError::Sha256(_))));
    }
}
