//! The poller's ports as one parameter: what the poller and its pages are generic over is one
//! [`PollerPorts`], whose associated types name each port, built from one [`Ports`] value.

use relay_runtime::{DeadLetterSink, HoldRelease, Publisher, StatusStore};

use super::ttl::PendingTtl;
use crate::index::{PendingCounts, PendingPages};

/// The ports a poller works through, named by role.
pub trait PollerPorts: Sized {
    /// The pending index: its pages (the pages' port) and its counts (the sweep's).
    type Index: PendingPages + PendingCounts + Clone;
    type Publisher: Publisher;
    type Store: StatusStore;
    type DeadLetters: DeadLetterSink;
    /// The TTL refresh's store.
    type Ttl: PendingTtl;
    /// The poller's side of the aggregate holds.
    type Holds: HoldRelease;

    /// The ports, one value each.
    fn into_ports(self) -> PortsOf<Self>;
}

/// The values of `W`'s ports.
pub type PortsOf<W> = Ports<
    <W as PollerPorts>::Index,
    <W as PollerPorts>::Publisher,
    <W as PollerPorts>::Store,
    <W as PollerPorts>::DeadLetters,
    <W as PollerPorts>::Ttl,
    <W as PollerPorts>::Holds,
>;

/// One value of each port.
#[derive(Debug, Clone)]
pub struct Ports<I, P, S, D, T, H> {
    pub index: I,
    pub publisher: P,
    pub store: S,
    pub dead_letters: D,
    pub ttl: T,
    pub holds: H,
}

impl<I, P, S, D, T, H> PollerPorts for Ports<I, P, S, D, T, H>
where
    I: PendingPages + PendingCounts + Clone,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    T: PendingTtl,
    H: HoldRelease,
{
    type Index = I;
    type Publisher = P;
    type Store = S;
    type DeadLetters = D;
    type Ttl = T;
    type Holds = H;

    fn into_ports(self) -> Self {
        self
    }
}

impl<X: Clone> Ports<X, X, X, X, X, X> {
    /// Every port served by `world` (a test's fake of them all).
    pub fn all(world: X) -> Self {
        Self {
            index: world.clone(),
            publisher: world.clone(),
            store: world.clone(),
            dead_letters: world.clone(),
            ttl: world.clone(),
            holds: world,
        }
    }
}
