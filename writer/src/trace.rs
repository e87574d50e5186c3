//! The caller's trace context, carried to the bus: the writer stores it as the outbox item's
//! `TraceHeader`, and the relays copy it to the `PutEvents` entry's `TraceHeader`, so the event
//! joins the caller's X-Ray trace.

use std::fmt;

use outbox_shared::limits::PUT_EVENTS_TRACE_HEADER_MAX_CHARS;

use crate::error::InputError;

/// The environment variable Lambda sets to the invocation's X-Ray trace header.
pub const LAMBDA_TRACE_ENV: &str = "_X_AMZN_TRACE_ID";

/// Longest `TraceHeader` EventBridge accepts on a `PutEvents` entry (ASCII here, so characters
/// and bytes agree).
pub const MAX_TRACE_HEADER_LEN: usize = PUT_EVENTS_TRACE_HEADER_MAX_CHARS;

/// An X-Ray trace header (`Root=1-…;Parent=…;Sampled=1`), checked against EventBridge's limits:
/// 1 to 500 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceHeader(String);

impl TraceHeader {
    /// # Errors
    /// [`InputError::TraceHeader`] when `header` is empty, longer than 500 characters, or holds a
    /// character that is not printable ASCII.
    pub fn new(header: impl Into<String>) -> Result<Self, InputError> {
        let header = header.into();
        let reason = if header.is_empty() {
            Some("it is empty".to_owned())
        } else if header.len() > MAX_TRACE_HEADER_LEN {
            Some(format!(
                "it is {} characters, more than the {MAX_TRACE_HEADER_LEN} EventBridge accepts",
                header.len()
            ))
        } else {
            header
                .char_indices()
                .find(|(_, c)| !c.is_ascii_graphic())
                .map(|(i, _)| format!("character {i} is not printable ASCII"))
        };
        match reason {
            Some(reason) => Err(InputError::TraceHeader { reason }),
            None => Ok(Self(header)),
        }
    }

    /// The trace header Lambda gives the running invocation (`_X_AMZN_TRACE_ID`), if it is set and
    /// valid; `None` outside Lambda.
    pub fn from_lambda_environment() -> Option<Self> {
        Self::from_lambda_value(std::env::var(LAMBDA_TRACE_ENV).ok())
    }

    /// [`TraceHeader::from_lambda_environment`] on a given value of the variable.
    fn from_lambda_value(value: Option<String>) -> Option<Self> {
        value.and_then(|v| Self::new(v).ok())
    }

    /// `explicit`, or else the Lambda invocation's trace header.
    pub(crate) fn or_from_environment(explicit: Option<&Self>) -> Option<Self> {
        explicit.cloned().or_else(Self::from_lambda_environment)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn accepts_an_xray_header_and_rejects_what_eventbridge_would() {
        assert_eq!(TraceHeader::new(XRAY).unwrap().as_str(), XRAY);
        for (bad, why) in [
            (String::new(), "empty"),
            ("a".repeat(501), "501 characters"),
            ("Root=1 2".to_owned(), "character 6"),
            ("Root=é".to_owned(), "character 5"),
        ] {
            let err = TraceHeader::new(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
            assert!(err.contains("trace header"), "{err}");
        }
    }

    #[test]
    fn falls_back_to_the_lambda_invocations_header() {
        assert_eq!(
            TraceHeader::from_lambda_value(Some(XRAY.to_owned())),
            Some(TraceHeader(XRAY.to_owned()))
        );
        assert_eq!(TraceHeader::from_lambda_value(None), None);
        // A malformed variable is ignored rather than failing the write.
        assert_eq!(TraceHeader::from_lambda_value(Some(String::new())), None);
    }
}
