//! The publisher's request builder: which events share a call to the target, and which call waits
//! for which, so that one aggregate's events leave in order. Pure functions of the events, apart
//! from sending them ([`super::send`]).
//!
//! Order, on every target: a call holds at most one event of an aggregate, and a call holding an
//! aggregate's event waits until the call holding the aggregate's previous event has finished,
//! retries included ([`call_dependencies`]); the sender then sends nothing of an aggregate after
//! an event of it that was not published. So an aggregate never has two unconfirmed events in
//! flight: a retried entry, alone of its aggregate in its call, cannot overtake a later event of
//! its aggregate, whatever the target does with the entries of one call. This is what keeps
//! Kinesis's `PutRecords` in order under partial failures: AWS warns that retrying only a call's
//! failed records can put them behind later records of their partition key, which here are never
//! in the same call nor sent before the retry is accepted.

use std::borrow::Borrow;
use std::collections::HashMap;

use outbox_shared::OutboundEvent;

/// Packs `indices` into calls of at most `max_entries` entries and `max_bytes` bytes (each entry
/// `size` bytes, as the target counts it), at most one event of an aggregate per call, each event
/// in a later call than its aggregate's previous one; within a call, events keep their input
/// order.
pub fn pack_calls<E: Borrow<OutboundEvent>>(
    events: &[E],
    indices: impl IntoIterator<Item = usize>,
    size: impl Fn(&OutboundEvent) -> usize,
    max_entries: usize,
    max_bytes: usize,
) -> Vec<Vec<usize>> {
    let mut calls: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut last_call_of: HashMap<&str, usize> = HashMap::new();
    // Calls before this one are full.
    let mut first_open = 0;
    for index in indices {
        let event = events[index].borrow();
        let size = size(event);
        let key = event.ordering_key.as_str();
        let earliest = last_call_of
            .get(key)
            .map_or(first_open, |&c| (c + 1).max(first_open));
        let fits = |(entries, bytes): &(Vec<usize>, usize)| {
            entries.is_empty() || (entries.len() < max_entries && bytes + size <= max_bytes)
        };
        let call = match (earliest..calls.len()).find(|&c| fits(&calls[c])) {
            Some(call) => call,
            None => {
                calls.push((Vec::new(), 0));
                calls.len() - 1
            }
        };
        calls[call].0.push(index);
        calls[call].1 += size;
        last_call_of.insert(key, call);
        while first_open < calls.len() && calls[first_open].0.len() >= max_entries {
            first_open += 1;
        }
    }
    calls.into_iter().map(|(entries, _)| entries).collect()
}

/// For each call, the earlier calls it must wait for: the latest earlier call sharing an
/// ordering key with it.
pub(crate) fn call_dependencies<E: Borrow<OutboundEvent>>(
    events: &[E],
    calls: &[Vec<usize>],
) -> Vec<Vec<usize>> {
    let mut last_call_of: HashMap<&str, usize> = HashMap::new();
    calls
        .iter()
        .enumerate()
        .map(|(call, indices)| {
            let mut deps: Vec<usize> = indices
                .iter()
                .filter_map(|&i| {
                    last_call_of.insert(events[i].borrow().ordering_key.as_str(), call)
                })
                .filter(|&earlier| earlier != call)
                .collect();
            deps.sort_unstable();
            deps.dedup();
            deps
        })
        .collect()
}

/// For each packed event, the previous event of its aggregate (if any).
pub(crate) fn previous_of_aggregate<E: Borrow<OutboundEvent>>(
    events: &[E],
    calls: &[Vec<usize>],
) -> HashMap<usize, usize> {
    let mut in_order: Vec<usize> = calls.concat();
    in_order.sort_unstable();
    let mut last: HashMap<&str, usize> = HashMap::new();
    in_order
        .into_iter()
        .filter_map(|index| {
            last.insert(events[index].borrow().ordering_key.as_str(), index)
                .map(|previous| (index, previous))
        })
        .collect()
}
