//! The characters SQS takes in a message: a letter's body escapes the others, its attributes
//! replace them.

use std::io;

use serde::Serialize;

use super::{DeadLetter, DeadLetterError};

/// Whether SQS takes `c` in a message body or a string attribute value (`SendMessage` answers
/// `InvalidMessageContents` otherwise): XML 1.0's characters, `#x9 | #xA | #xD | #x20-#xD7FF |
/// #xE000-#xFFFD | #x10000-#x10FFFF`. U+D800 to U+DFFF are no characters (no `str` holds them).
pub fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// `text` with each character SQS refuses replaced by U+FFFD, for a message attribute: the
/// attributes are for filtering and reading at a glance, the body holds every value exactly.
pub fn sqs_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().all(sqs_allows) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if sqs_allows(c) {
                c
            } else {
                char::REPLACEMENT_CHARACTER
            }
        })
        .collect::<String>()
        .into()
}

/// serde_json's compact output with each character SQS refuses written as a `\uXXXX` escape
/// (a surrogate pair above U+FFFF, though SQS refuses none there). serde_json escapes the control
/// characters below U+0020 itself; what reaches a string fragment are U+FFFE and U+FFFF. Every
/// string goes through here, object keys too, and an escape stands for the same character in
/// JSON, so the body parses back to the same value.
struct SqsJson;

impl serde_json::ser::Formatter for SqsJson {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| !sqs_allows(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// `letter` as a message body: JSON holding only characters SQS takes ([`SqsJson`]).
pub(super) fn encode(letter: &DeadLetter) -> Result<String, DeadLetterError> {
    let mut body = Vec::new();
    letter
        .serialize(&mut serde_json::Serializer::with_formatter(
            &mut body, SqsJson,
        ))
        .map_err(|e| DeadLetterError::Encode {
            event_id: letter.event_id.clone(),
            message: e.to_string(),
        })?;
    Ok(String::from_utf8(body).expect("serde_json writes UTF-8"))
}
