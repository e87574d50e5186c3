//! The leases one poller owns, as its [`LeaseManager`](super::LeaseManager) and its poll loop
//! ([`LeasedShards`](crate::assignment::LeasedShards)) share them: the manager takes, renews and
//! hands them over; the poll loop polls them page by page, up to each one's poll deadline.

use outbox_shared::schema::PendingPartition;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::{LeaseView, Millis};

/// One lease this poller owns.
#[derive(Debug, Clone)]
pub(crate) struct OwnedLease {
    pub(crate) counter: u64,
    /// No page of the partition starts after this.
    pub(crate) poll_deadline: Millis,
    /// Asked for by another poller: no new page starts; handed over once no page is in flight.
    pub(crate) handing_over: bool,
    /// Pages in flight.
    pub(crate) busy: u32,
    /// When the last pass over the partition finished; written with the next renewal.
    pub(crate) last_pass_at: Option<Millis>,
}

/// The leases a poller owns, and the table as it last read it.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The leases this poller owns, by partition.
    pub(crate) owned: BTreeMap<PendingPartition, OwnedLease>,
    /// The table as the last successful read saw it.
    pub(crate) view: Option<LeaseView>,
    /// Shards seen without a lease item, since when.
    pub(crate) missing_since: BTreeMap<PendingPartition, Millis>,
}

/// [`State`] behind its lock, and the signal a hand-over waits on.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled whenever a page ends (a hand-over waits for the partition to be idle).
    pub(crate) idle: tokio::sync::Notify,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("lease state lock is never poisoned")
    }
}
