//! The check's report: every item in order, as lines or one JSON object, and its outcome in
//! words.

use std::fmt::Write as _;

use serde::Serialize;

use super::item::{Item, Verdict};

/// What the check found, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Whether every item holds (skipped ones included).
    pub ok: bool,
    pub items: Vec<Item>,
}

impl Report {
    pub fn new(items: Vec<Item>) -> Self {
        Self {
            ok: items.iter().all(|i| i.verdict != Verdict::Fail),
            items,
        }
    }

    /// One line per item: `OK`, `FAIL` or `SKIP`, the item, what was found, and the fix.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for item in &self.items {
            let verdict = match item.verdict {
                Verdict::Ok => "OK  ",
                Verdict::Fail => "FAIL",
                Verdict::Skipped => "SKIP",
            };
            let _ = write!(out, "{verdict}  {:<18} {}", item.item, item.detail);
            if let Some(fix) = &item.fix {
                let _ = write!(out, "; fix: {fix}");
            }
            out.push('\n');
        }
        out
    }

    /// The outcome in words: the command's last line.
    pub fn outcome(&self) -> String {
        let failed: Vec<&str> = self
            .items
            .iter()
            .filter(|i| i.verdict == Verdict::Fail)
            .map(|i| i.item)
            .collect();
        let skipped = self
            .items
            .iter()
            .filter(|i| i.verdict == Verdict::Skipped)
            .count();
        let skipped = if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        };
        if failed.is_empty() {
            format!(
                "check: the deployment is what the relays rely on: {} items hold{skipped}",
                self.items.len()
                    - self
                        .items
                        .iter()
                        .filter(|i| i.verdict == Verdict::Skipped)
                        .count()
            )
        } else {
            format!(
                "check: {} of {} items do not hold ({}){skipped}: see each FAIL line's fix",
                failed.len(),
                self.items.len(),
                failed.join(", ")
            )
        }
    }
}
