//! Which dead-lettered events a redrive takes ([`Selection`]) and where it reads them
//! ([`Source`]).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use outbox_shared::time::parse_timestamp;

/// Which dead-lettered events to redrive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only these event ids (all when empty).
    pub event_ids: HashSet<String>,
    pub event_type: Option<String>,
    /// Only events created at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Only events created before this.
    pub until: Option<DateTime<Utc>>,
    /// At most this many events.
    pub limit: Option<usize>,
}

impl Selection {
    pub(super) fn admits(
        &self,
        event_id: Option<&str>,
        event_type: Option<&str>,
        created_at: Option<&str>,
    ) -> bool {
        if !self.event_ids.is_empty() && !event_id.is_some_and(|id| self.event_ids.contains(id)) {
            return false;
        }
        if let Some(wanted) = &self.event_type
            && event_type != Some(wanted.as_str())
        {
            return false;
        }
        if self.since.is_none() && self.until.is_none() {
            return true;
        }
        let Some(created) = created_at.and_then(|t| parse_timestamp(t).ok()) else {
            return false;
        };
        self.since.is_none_or(|since| created >= since)
            && self.until.is_none_or(|until| created < until)
    }
}

/// Where the dead-lettered events are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The dead-letter queue (both relays' messages).
    Queue,
    /// `DEAD_LETTERED` items in the table.
    Table,
}
