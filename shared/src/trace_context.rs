//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and `tracestate`
//! an outbox item carries beside X-Ray's `TraceHeader`, captured by the writer from the caller's
//! span and carried by the relays in the envelope on every target, so a consumer continues the
//! caller's trace wherever the event went.
//!
//! Both are validated as the specification's receivers do: a `traceparent` that does not parse is
//! no context at all; a `tracestate` that does not parse is dropped and the `traceparent` kept
//! (section 3.3.1.1: "If the tracestate value is invalid, the vendor MUST discard it"; the
//! `traceparent` stands on its own). Errors name what is wrong, never the value.

use std::fmt;

/// `traceparent` of version `00`: `00-` 32 hex `-` 16 hex `-` 2 hex.
const VERSION_00_LEN: usize = 55;

/// Most list-members a `tracestate` may have (section 3.3.1.1).
pub const TRACESTATE_MAX_MEMBERS: usize = 32;

/// Longest `tracestate` kept, in characters: what the specification asks every vendor to
/// propagate ("at least 512 characters of a combined header"). A longer valid one is truncated
/// as section 3.3.1.5 says ([`TraceContext::new`]), not dropped.
pub const TRACESTATE_MAX_CHARS: usize = 512;

/// List-members longer than this, in characters, are the first to go when a `tracestate` is
/// truncated (section 3.3.1.5: "entries larger than 128 characters SHOULD be removed first").
pub const TRACESTATE_LONG_MEMBER_CHARS: usize = 128;

/// Why a `traceparent` or `tracestate` is not one the W3C Trace Context specification allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    #[error("traceparent is not version-traceid-parentid-flags in lowercase hex: {0}")]
    Traceparent(&'static str),
    #[error("tracestate is not a list of key=value members: {0}")]
    Tracestate(&'static str),
}

/// A validated W3C trace context: a `traceparent` and, if any, its `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// A context from a `traceparent` and an optional `tracestate` (an empty one is none). A
    /// `tracestate` longer than [`TRACESTATE_MAX_CHARS`] is truncated as the specification says
    /// ([`truncate_tracestate`]).
    ///
    /// # Errors
    /// [`TraceContextError`] when either is not what the specification allows.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        check_traceparent(traceparent)?;
        let tracestate = tracestate.filter(|s| !s.trim().is_empty());
        if let Some(state) = tracestate {
            check_tracestate(state)?;
        }
        Ok(Self {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.and_then(truncate_tracestate),
        })
    }

    /// The context another client stored (or a message carried), as a receiver keeps it: `None`
    /// when the `traceparent` is missing or invalid, the `tracestate` dropped when it alone is
    /// invalid. The error says what was dropped, for a warning.
    pub fn received(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> (Option<Self>, Option<TraceContextError>) {
        let Some(traceparent) = traceparent else {
            return (None, None);
        };
        if let Err(error) = check_traceparent(traceparent) {
            return (None, Some(error));
        }
        match Self::new(traceparent, tracestate) {
            Ok(context) => (Some(context), None),
            Err(error) => (
                Some(Self {
                    traceparent: traceparent.to_owned(),
                    tracestate: None,
                }),
                Some(error),
            ),
        }
    }

    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the span that wrote the event (the parent of what follows): 16 hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or_default()
    }

    pub fn is_sampled(&self) -> bool {
        self.flags() & 1 == 1
    }

    /// The context of an X-Ray trace header (`Root=1-{8 hex}-{24 hex};Parent={16 hex};Sampled=1`),
    /// as AWS's X-Ray propagator maps it: the trace id is the root's two hex parts, the parent
    /// id and the sampled flag are the header's. `None` when the header has no valid root and
    /// parent.
    pub fn from_xray(header: &str) -> Option<Self> {
        let (mut root, mut parent, mut sampled) = (None, None, false);
        for part in header.split(';').map(str::trim) {
            match part.split_once('=') {
                Some(("Root", value)) => root = Some(value),
                Some(("Parent", value)) => parent = Some(value),
                Some(("Sampled", value)) => sampled = value == "1",
                _ => {}
            }
        }
        let root = root?.strip_prefix("1-")?;
        let (epoch, unique) = root.split_once('-')?;
        if epoch.len() != 8 || unique.len() != 24 {
            return None;
        }
        let flags = if sampled { "01" } else { "00" };
        let traceparent = format!(
            "00-{}{}-{}-{flags}",
            epoch.to_ascii_lowercase(),
            unique.to_ascii_lowercase(),
            parent?.to_ascii_lowercase()
        );
        Self::new(&traceparent, None).ok()
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a `traceparent` as section 3.2 and its versioning rules say: version `00` exactly
/// 55 characters; a later version (not `ff`) at least 55, its first four fields parsed as
/// version `00`'s, anything after them behind a `-`. Ids of only zeros are invalid.
///
/// # Errors
/// [`TraceContextError::Traceparent`] naming what is wrong.
pub fn check_traceparent(value: &str) -> Result<(), TraceContextError> {
    let bad = |why| Err(TraceContextError::Traceparent(why));
    if !value.is_ascii() || value.len() < VERSION_00_LEN {
        return bad("shorter than 55 characters, or not ASCII");
    }
    let version = &value[..2];
    if !is_lower_hex(version) || version == "ff" {
        return bad("its version is not two lowercase hex digits other than ff");
    }
    if version == "00" && value.len() != VERSION_00_LEN {
        return bad("version 00 is 55 characters");
    }
    if value.len() > VERSION_00_LEN && value.as_bytes()[VERSION_00_LEN] != b'-' {
        return bad("a later version's fields after the flags must follow a '-'");
    }
    let bytes = value.as_bytes();
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return bad("its fields are not separated by '-'");
    }
    let (trace_id, parent_id, flags) = (&value[3..35], &value[36..52], &value[53..55]);
    if !is_lower_hex(trace_id) || !is_lower_hex(parent_id) || !is_lower_hex(flags) {
        return bad("an id or the flags are not lowercase hex");
    }
    if trace_id.bytes().all(|b| b == b'0') {
        return bad("its trace id is all zeros");
    }
    if parent_id.bytes().all(|b| b == b'0') {
        return bad("its parent id is all zeros");
    }
    Ok(())
}

/// Checks a `tracestate` as section 3.3 says: at most 32 list-members separated by commas
/// (empty ones allowed), each `key=value`, a key a simple key (`lcalpha 0*255(lcalpha / DIGIT /
/// "_" / "-" / "*" / "/")`) or a multi-tenant one (`tenant@system`), each key once, a value of
/// 0 to 255 printable ASCII characters then one that is neither a space, `,` nor `=`. Its length
/// is not checked here: a longer one is truncated ([`truncate_tracestate`]), not refused.
///
/// # Errors
/// [`TraceContextError::Tracestate`] naming what is wrong.
pub fn check_tracestate(value: &str) -> Result<(), TraceContextError> {
    let bad = |why| Err(TraceContextError::Tracestate(why));
    if !value.is_ascii() {
        return bad("not ASCII");
    }
    let mut keys: Vec<&str> = Vec::new();
    for member in members(value) {
        let Some((key, member_value)) = member.split_once('=') else {
            return bad("a member has no '='");
        };
        if !is_key(key) {
            return bad("a key is not a simple or a multi-tenant key");
        }
        if !is_value(member_value) {
            return bad("a value is empty, too long or holds a character it may not");
        }
        if keys.contains(&key) {
            return bad("a key is repeated");
        }
        keys.push(key);
        if keys.len() > TRACESTATE_MAX_MEMBERS {
            return bad("more than 32 members");
        }
    }
    Ok(())
}

/// The list-members of a `tracestate`, without the spaces around them or the empty ones.
fn members(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
}

/// A valid `tracestate` as it is kept: as it is when it has at most [`TRACESTATE_MAX_CHARS`]
/// characters; longer, truncated as section 3.3.1.5 says: list-members longer than
/// [`TRACESTATE_LONG_MEMBER_CHARS`] removed first (the last first), then members from the end,
/// until it fits. `None` when no member is left.
pub fn truncate_tracestate(value: &str) -> Option<String> {
    if value.len() <= TRACESTATE_MAX_CHARS {
        return Some(value.to_owned());
    }
    let mut kept: Vec<&str> = members(value).collect();
    let length =
        |kept: &[&str]| kept.iter().map(|m| m.len()).sum::<usize>() + kept.len().saturating_sub(1);
    while length(&kept) > TRACESTATE_MAX_CHARS {
        match kept
            .iter()
            .rposition(|m| m.len() > TRACESTATE_LONG_MEMBER_CHARS)
        {
            Some(long) => kept.remove(long),
            None => kept.pop()?,
        };
    }
    (!kept.is_empty()).then(|| kept.join(","))
}

fn key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b)
}

fn is_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    match key.split_once('@') {
        None => {
            (1..=256).contains(&bytes.len())
                && bytes[0].is_ascii_lowercase()
                && bytes.iter().all(|&b| key_char(b))
        }
        Some((tenant, system)) => {
            let (tenant, system) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&tenant.len())
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && tenant.iter().all(|&b| key_char(b))
                && (1..=14).contains(&system.len())
                && system[0].is_ascii_lowercase()
                && system.iter().all(|&b| key_char(b))
        }
    }
}

fn is_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let printable = |b: u8| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=';
    (1..=256).contains(&bytes.len())
        && bytes.iter().all(|&b| printable(b))
        && bytes.last().is_some_and(|&b| b != b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own example (section 3.2.2.5 and appendix).
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_and_tracestate_are_kept_and_read() {
        let context =
            TraceContext::new(PARENT, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.parent_id(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert_eq!(
            context.tracestate(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(
            TraceContext::new(PARENT, Some(" ")).unwrap().tracestate(),
            None
        );
    }

    #[test]
    fn traceparents_the_specification_refuses_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        ] {
            assert!(check_traceparent(bad).is_err(), "{bad:?}");
        }
        // A later version with more fields is parsed by its first four, as the spec says.
        assert!(
            check_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later")
                .is_ok()
        );
    }

    #[test]
    fn tracestates_the_specification_refuses_are_refused() {
        let too_many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            "novalue",
            "Upper=v",
            "k=",
            "k=a,b",
            "k=a=b",
            "k=v,k=w",
            "1key=v",
            "t@Sys=v",
            too_many.as_str(),
        ] {
            assert!(check_tracestate(bad).is_err(), "{bad:?}");
        }
        let thirty_two = (0..32)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for good in [
            "k=v",
            "k=v , ,other=w",
            "1tenant@sys=v",
            "k=va lue",
            thirty_two.as_str(),
        ] {
            assert!(check_tracestate(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_tracestate_too_long_is_truncated_long_members_first_then_from_the_end() {
        // Given a valid tracestate of 32 members, 31 short ones and a long one in the middle,
        // 727 characters in all
        let short = |i: usize| format!("k{i:02}={}", "v".repeat(12)); // 16 characters each
        let long = format!("long={}", "x".repeat(195)); // 200 characters
        let mut members: Vec<String> = (0..31).map(short).collect();
        members.insert(10, long.clone());
        let state = members.join(",");
        assert!(state.len() > TRACESTATE_MAX_CHARS, "{}", state.len());

        // When a context is made of it
        let context = TraceContext::new(PARENT, Some(&state)).expect("a valid context");
        let (received, error) = TraceContext::received(Some(PARENT), Some(&state));

        // Then the long member went first, and the rest is every short member (31 * 16 + 30
        // commas = 526 characters: still too long, so the last one went too), in order
        let kept = context.tracestate().expect("a tracestate is kept");
        let expected = (0..30).map(short).collect::<Vec<_>>().join(",");
        assert_eq!(kept, expected);
        assert!(kept.len() <= TRACESTATE_MAX_CHARS);
        assert_eq!(received.unwrap().tracestate(), Some(expected.as_str()));
        assert_eq!(error, None);

        // And one that fits is kept as it is, spaces and all
        assert_eq!(
            TraceContext::new(PARENT, Some("a=1 , b=2"))
                .unwrap()
                .tracestate(),
            Some("a=1 , b=2")
        );
        // And long members go from the end only until it fits
        let long_member = |i: usize| format!("h{i}={}", "y".repeat(250));
        let three_long = (0..3).map(long_member).collect::<Vec<_>>().join(",");
        let two_long = (0..2).map(long_member).collect::<Vec<_>>().join(",");
        assert_eq!(truncate_tracestate(&three_long), Some(two_long));
        // And a member longer than the whole limit leaves none
        let alone = format!("{}={}", "k".repeat(256), "v".repeat(256));
        assert!(check_tracestate(&alone).is_ok());
        assert_eq!(truncate_tracestate(&alone), None);
    }

    #[test]
    fn a_received_context_drops_what_is_invalid_and_says_so() {
        let (context, error) = TraceContext::received(Some("nonsense"), Some("k=v"));
        assert_eq!(context, None);
        assert!(matches!(error, Some(TraceContextError::Traceparent(_))));
        let (context, error) = TraceContext::received(Some(PARENT), Some("K=v"));
        assert_eq!(context.unwrap().tracestate(), None);
        assert!(matches!(error, Some(TraceContextError::Tracestate(_))));
        assert_eq!(TraceContext::received(None, Some("k=v")), (None, None));
        // the message names what is wrong, never the value
        let error = check_traceparent("00-secret").unwrap_err().to_string();
        assert!(!error.contains("secret"), "{error}");
    }

    #[test]
    fn an_xray_header_maps_to_the_same_trace() {
        let context = TraceContext::from_xray(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        )
        .unwrap();
        assert_eq!(
            context.traceparent(),
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        );
        assert_eq!(
            TraceContext::from_xray("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0"),
            None
        );
        assert_eq!(
            TraceContext::from_xray("Root=1-abc;Parent=53995c3f42cd8ad8"),
            None
        );
    }
}
