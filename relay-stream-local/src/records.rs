//! Conversion of `aws-sdk-dynamodbstreams` records into the Lambda event shape, so the local
//! runner drives the very handler the Lambda runs.

use aws_lambda_events::dynamodb::{EventRecord, StreamRecord, StreamViewType, UserIdentity};
use aws_sdk_dynamodbstreams::types::{self as sdk, OperationType};
use chrono::{DateTime, Utc};

/// The Lambda event record for a record read with `GetRecords` from `stream_arn`.
pub fn to_event_record(record: &sdk::Record, stream_arn: &str) -> EventRecord {
    let mut out = EventRecord::default();
    out.aws_region = record.aws_region().unwrap_or_default().to_owned();
    out.event_id = record.event_id().unwrap_or_default().to_owned();
    out.event_name = record
        .event_name()
        .map(OperationType::as_str)
        .unwrap_or_default()
        .to_owned();
    out.event_source = record.event_source().map(str::to_owned);
    out.event_version = record.event_version().map(str::to_owned);
    out.event_source_arn = Some(stream_arn.to_owned());
    out.user_identity = record.user_identity().map(|identity| {
        let mut user = UserIdentity::default();
        identity
            .r#type()
            .unwrap_or_default()
            .clone_into(&mut user.type_);
        identity
            .principal_id()
            .unwrap_or_default()
            .clone_into(&mut user.principal_id);
        user
    });
    if let Some(change) = record.dynamodb() {
        out.change = to_stream_record(change);
    }
    out
}

fn to_stream_record(change: &sdk::StreamRecord) -> StreamRecord {
    let mut out = StreamRecord::default();
    out.approximate_creation_date_time = change
        .approximate_creation_date_time()
        .and_then(|t| DateTime::<Utc>::from_timestamp_millis(t.to_millis().ok()?))
        .unwrap_or_default();
    if let Some(keys) = change.keys() {
        out.keys = keys.clone().into();
    }
    if let Some(image) = change.new_image() {
        out.new_image = image.clone().into();
    }
    if let Some(image) = change.old_image() {
        out.old_image = image.clone().into();
    }
    out.sequence_number = change.sequence_number().map(str::to_owned);
    out.size_bytes = change.size_bytes().unwrap_or_default();
    out.stream_view_type = change.stream_view_type().map(|v| match v {
        sdk::StreamViewType::NewImage => StreamViewType::NewImage,
        sdk::StreamViewType::OldImage => StreamViewType::OldImage,
        sdk::StreamViewType::NewAndOldImages => StreamViewType::NewAndOldImages,
        _ => StreamViewType::KeysOnly,
    });
    out
}
