//! What a redrive did: a line per event or message, and the totals.

use std::fmt::Write as _;

use serde::Serialize;

/// What happened to one event (or one message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub created_at: Option<String>,
    /// `redriven`, `recreated`, `would redrive`, `would recreate`, `skipped: …`, `left in queue: …`.
    pub action: String,
}

/// The one-line summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Put back to pending (re-created ones included); with `--dry-run`, what would be.
    pub redriven: u64,
    /// Of those, re-created from the message because the item was gone.
    pub recreated: u64,
    /// Published right away (`--publish`).
    pub published: u64,
    /// Selected but nothing to do (already pending or published, or changed meanwhile).
    pub skipped: u64,
    /// Messages left in the queue: not ours, unreadable, or an item that can't be re-created.
    pub left_in_queue: u64,
    pub dry_run: bool,
    /// One line per event or message, for people.
    #[serde(skip)]
    pub lines: Vec<Line>,
}

impl Summary {
    /// A table for people.
    pub fn to_table(&self) -> String {
        let mut out = String::from(
            "event id                               type                 created at                 action\n",
        );
        for line in &self.lines {
            let _ = writeln!(
                out,
                "{:<38} {:<20} {:<26} {}",
                line.event_id.as_deref().unwrap_or("-"),
                line.event_type.as_deref().unwrap_or("-"),
                line.created_at.as_deref().unwrap_or("-"),
                line.action
            );
        }
        let _ = writeln!(
            out,
            "\n{}{} redriven ({} re-created), {} published, {} skipped, {} left in the queue",
            if self.dry_run { "dry run: " } else { "" },
            self.redriven,
            self.recreated,
            self.published,
            self.skipped,
            self.left_in_queue
        );
        out
    }
}
