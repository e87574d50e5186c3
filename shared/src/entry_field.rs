//! The `PutEvents` entry fields whose limits EventBridge enforces on the whole call: an outbox item's
//! `EventType` (the entry's `DetailType`) and `TraceHeader`. The writer checks them before it
//! writes, the relays before they publish. A model constraint makes EventBridge answer the whole
//! call with `ValidationException`, so one bad entry would fail every entry of its call.

use crate::limits::{PUT_EVENTS_DETAIL_TYPE_MAX_CHARS, PUT_EVENTS_TRACE_HEADER_MAX_CHARS};
use crate::schema::attr;

/// An item attribute whose `PutEvents` entry field EventBridge refuses. These are model
/// constraints: EventBridge answers the whole call with `ValidationException`, every entry in it
/// fails, not only this one. Names the attribute and the limit, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{attribute} is {chars} characters; EventBridge accepts a {entry_field} of {min} to {max}")]
pub struct EntryFieldError {
    /// The outbox item's attribute (`EventType`, `TraceHeader`).
    pub attribute: &'static str,
    /// The `PutEvents` entry field it becomes (`DetailType`, `TraceHeader`).
    pub entry_field: &'static str,
    pub chars: usize,
    pub min: usize,
    pub max: usize,
}

/// Checks an `EventType` as the entry's `DetailType`: 1 to 128 characters.
///
/// # Errors
/// [`EntryFieldError`] naming `EventType` and the limit.
pub fn check_detail_type(event_type: &str) -> Result<(), EntryFieldError> {
    check_length(
        attr::EVENT_TYPE,
        "DetailType",
        event_type,
        PUT_EVENTS_DETAIL_TYPE_MAX_CHARS,
    )
}

/// Checks a `TraceHeader` as the entry's `TraceHeader`: 1 to 500 characters.
///
/// # Errors
/// [`EntryFieldError`] naming `TraceHeader` and the limit.
pub fn check_trace_header(trace_header: &str) -> Result<(), EntryFieldError> {
    check_length(
        attr::TRACE_HEADER,
        "TraceHeader",
        trace_header,
        PUT_EVENTS_TRACE_HEADER_MAX_CHARS,
    )
}

/// Characters, as a Smithy `@length` constraint counts them (not bytes).
fn check_length(
    attribute: &'static str,
    entry_field: &'static str,
    value: &str,
    max: usize,
) -> Result<(), EntryFieldError> {
    let chars = value.chars().count();
    if (1..=max).contains(&chars) {
        return Ok(());
    }
    Err(EntryFieldError {
        attribute,
        entry_field,
        chars,
        min: 1,
        max,
    })
}
