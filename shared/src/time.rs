//! Timestamps in the item schema: ISO-8601 UTC with millisecond precision.
//!
//! The format has a fixed width (`2026-11-22T10:15:30.123Z`) so that `GSI1SK =
//! EVENT#{CreatedAt}#{EventId}` sorts chronologically as a plain string.

use chrono::{DateTime, SecondsFormat, Utc};

/// Formats a timestamp the way the item schema stores it.
pub fn format_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses any RFC 3339 timestamp (as other clients may write it) into UTC.
///
/// # Errors
/// Returns the parse error when the text is not RFC 3339.
pub fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn format_is_fixed_width_and_sortable() {
        let a = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let b = a + chrono::Duration::milliseconds(7);
        assert_eq!(format_timestamp(a), "2026-01-02T03:04:05.000Z");
        assert_eq!(format_timestamp(b), "2026-01-02T03:04:05.007Z");
        assert!(format_timestamp(a) < format_timestamp(b));
    }

    #[test]
    fn parses_other_clients_formats() {
        let want = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(parse_timestamp("2026-01-02T03:04:05Z").unwrap(), want);
        assert_eq!(parse_timestamp("2026-01-02T04:04:05+01:00").unwrap(), want);
        assert!(parse_timestamp("yesterday").is_err());
    }
}
