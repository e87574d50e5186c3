//! The decisions of a lease round, as pure functions of the lease table's contents, the time and
//! what this poller holds: who is live, the fair share, which leases to take, whom to ask for
//! one, and whether to hand one over.

use outbox_shared::schema::PendingPartition;
use std::collections::{BTreeMap, BTreeSet};

use super::{Expect, LeaseView, Millis};

/// A poller's fair share of the partitions: `low` or `high` leases each (they differ by one when the
/// partitions do not divide evenly among the live pollers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairShare {
    pub live: usize,
    pub low: usize,
    pub high: usize,
}

/// The fair share of `partitions` among `live` pollers (at least one: the poller asking).
pub fn fair_share(partitions: usize, live: usize) -> FairShare {
    let live = live.max(1);
    FairShare {
        live,
        low: partitions / live,
        high: partitions.div_ceil(live),
    }
}

/// The live pollers at `now`: a fresh heartbeat or an unexpired lease, and `me`.
pub fn live_pollers(view: &LeaseView, me: &str, now: Millis) -> BTreeSet<String> {
    let mut live = live_at(view, now);
    live.insert(me.to_owned());
    live
}

/// The pollers live at `now`: a fresh heartbeat or an unexpired lease.
pub fn live_at(view: &LeaseView, now: Millis) -> BTreeSet<String> {
    let mut live: BTreeSet<String> = view
        .heartbeats
        .values()
        .filter(|h| h.is_live_at(now))
        .map(|h| h.owner.clone())
        .collect();
    live.extend(
        view.leases
            .values()
            .filter_map(|l| l.holder_at(now))
            .map(str::to_owned),
    );
    live
}

/// Unexpired leases per holder among `partitions`.
pub fn holdings(
    view: &LeaseView,
    partitions: &[PendingPartition],
    now: Millis,
) -> BTreeMap<String, usize> {
    let mut held: BTreeMap<String, usize> = BTreeMap::new();
    for partition in partitions {
        if let Some(holder) = view.leases.get(partition).and_then(|l| l.holder_at(now)) {
            *held.entry(holder.to_owned()).or_default() += 1;
        }
    }
    held
}

/// A request to the poller holding the most to hand one lease over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steal {
    pub partition: PendingPartition,
    pub holder: String,
}

/// What a round goes after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acquisitions {
    /// Free or expired leases to take, with what each write expects to find.
    pub take: Vec<(PendingPartition, Expect)>,
    /// At most one lease to ask another poller for.
    pub steal: Option<Steal>,
}

/// The leases `me` goes after this round, holding `mine` of `partitions`.
///
/// Free and expired leases are taken up to the high fair share, free ones first, in an order
/// rotated by `rotate` so pollers that start together do not all race for the same partitions. When
/// none is left to take, `me` is below the low share, and no request of its own is still open,
/// it asks the live poller holding the most for one lease, if that poller holds at least two more
/// than `me` (so a request always evens the split and never makes the two swap roles).
pub fn acquisitions(
    view: &LeaseView,
    me: &str,
    partitions: &[PendingPartition],
    mine: &BTreeSet<PendingPartition>,
    now: Millis,
    rotate: usize,
) -> Acquisitions {
    let live = live_pollers(view, me, now);
    let share = fair_share(partitions.len(), live.len());
    let count = partitions.iter().filter(|s| mine.contains(s)).count();
    let want = share.high.saturating_sub(count);
    let n = partitions.len().max(1);
    let mut candidates: Vec<(bool, usize, PendingPartition, Expect)> = partitions
        .iter()
        .enumerate()
        .filter(|(_, partition)| !mine.contains(partition))
        .filter_map(|(i, partition)| {
            let position = (i + n - rotate % n) % n;
            match view.leases.get(partition) {
                None => Some((false, position, partition.clone(), Expect::Missing)),
                Some(lease) if lease.is_takeable_at(now) => {
                    let expired = lease.owner.is_some();
                    Some((
                        expired,
                        position,
                        partition.clone(),
                        Expect::Counter(lease.counter),
                    ))
                }
                Some(_) => None,
            }
        })
        .collect();
    candidates.sort_unstable();
    let take: Vec<(PendingPartition, Expect)> = candidates
        .into_iter()
        .take(want)
        .map(|(_, _, partition, expect)| (partition, expect))
        .collect();
    let steal = if take.is_empty() && count < share.low && !has_open_request(view, me, now) {
        steal_from_the_most(view, me, partitions, count, now, &live)
    } else {
        None
    };
    Acquisitions { take, steal }
}

/// Whether a lease another poller holds carries a request from `me`.
fn has_open_request(view: &LeaseView, me: &str, now: Millis) -> bool {
    view.leases
        .values()
        .any(|l| l.handoff_to.as_deref() == Some(me) && l.holder_at(now).is_some_and(|h| h != me))
}

fn steal_from_the_most(
    view: &LeaseView,
    me: &str,
    partitions: &[PendingPartition],
    count: usize,
    now: Millis,
    live: &BTreeSet<String>,
) -> Option<Steal> {
    let held = holdings(view, partitions, now);
    // The most leases; among equals, the first owner id (every poller picks the same one).
    let (holder, &most) = held
        .iter()
        .filter(|(owner, _)| owner.as_str() != me && live.contains(*owner))
        .max_by(|(a, x), (b, y)| x.cmp(y).then_with(|| b.cmp(a)))?;
    if most <= count + 1 {
        return None;
    }
    let partition = partitions
        .iter()
        .rev()
        .find(|&partition| {
            view.leases.get(partition).is_some_and(|l| {
                l.holder_at(now) == Some(holder.as_str()) && l.handoff_to.is_none()
            })
        })
        .cloned()?;
    Some(Steal {
        partition,
        holder: holder.clone(),
    })
}

/// Whether `me`, holding `mine` leases, hands one over to `requester` at `now`: the requester
/// still holds at least two fewer (its request may be older than what it took since), and is
/// live, or too new for `view` (read before the request) to know it; a requester whose heartbeat
/// `view` shows expired is gone.
pub fn should_hand_over(
    view: &LeaseView,
    me: &str,
    mine: usize,
    requester: &str,
    partitions: &[PendingPartition],
    now: Millis,
) -> bool {
    let known = view.heartbeats.contains_key(requester);
    if requester == me || (known && !live_pollers(view, me, now).contains(requester)) {
        return false;
    }
    let theirs = holdings(view, partitions, now)
        .get(requester)
        .copied()
        .unwrap_or_default();
    mine > theirs + 1
}

#[cfg(test)]
mod tests {
    use super::super::{Heartbeat, Lease};
    use super::*;

    const NOW: Millis = 1_000_000;
    const DURATION: Millis = 3_000;

    fn shards(n: u16) -> Vec<PendingPartition> {
        (0..n).map(PendingPartition::from).collect()
    }

    fn lease(shard: u16, owner: Option<&str>, expires_at: Millis) -> Lease {
        Lease {
            partition: shard.into(),
            owner: owner.map(str::to_owned),
            expires_at,
            renewed_at: expires_at - DURATION,
            taken_at: expires_at - DURATION,
            counter: 7,
            handoff_to: None,
            last_pass_at: None,
        }
    }

    fn heartbeat(owner: &str, expires_at: Millis) -> Heartbeat {
        Heartbeat {
            owner: owner.into(),
            heartbeat_at: expires_at - DURATION,
            expires_at,
            started_at: 0,
            region: None,
        }
    }

    /// A view where `owners[i]` holds the shards listed, every lease fresh, every owner live.
    fn held_by(owners: &[(&str, &[u16])]) -> LeaseView {
        let mut view = LeaseView::default();
        for (owner, held) in owners {
            view.heartbeats
                .insert((*owner).to_owned(), heartbeat(owner, NOW + DURATION));
            for &shard in *held {
                view.leases
                    .insert(shard.into(), lease(shard, Some(owner), NOW + DURATION));
            }
        }
        view
    }

    #[test]
    fn fair_share_splits_as_evenly_as_the_shards_allow() {
        assert_eq!(
            fair_share(16, 3),
            FairShare {
                live: 3,
                low: 5,
                high: 6
            }
        );
        assert_eq!(
            fair_share(16, 4),
            FairShare {
                live: 4,
                low: 4,
                high: 4
            }
        );
        assert_eq!(fair_share(16, 0).high, 16);
        assert_eq!(fair_share(3, 5).low, 0);
        assert_eq!(fair_share(3, 5).high, 1);
    }

    #[test]
    fn live_means_a_fresh_heartbeat_or_an_unexpired_lease() {
        let mut view = held_by(&[("a", &[0])]);
        view.heartbeats
            .insert("stale".into(), heartbeat("stale", NOW));
        view.leases
            .insert(1.into(), lease(1, Some("no-heartbeat"), NOW + 1));
        view.leases
            .insert(2.into(), lease(2, Some("dead"), NOW - 1));

        let live = live_pollers(&view, "me", NOW);

        assert_eq!(
            live.into_iter().collect::<Vec<_>>(),
            ["a", "me", "no-heartbeat"]
        );
    }

    #[test]
    fn a_lone_poller_takes_every_free_lease() {
        let view = LeaseView::default();

        let plan = acquisitions(&view, "me", &shards(16), &BTreeSet::new(), NOW, 0);

        assert_eq!(plan.take.len(), 16);
        assert!(plan.take.iter().all(|(_, e)| *e == Expect::Missing));
        assert_eq!(plan.steal, None);
    }

    #[test]
    fn free_leases_are_taken_up_to_the_high_share_free_before_expired() {
        // Given 3 live pollers, 16 shards: b holds 0-4, shard 5 expired under dead "x", the rest free
        let mut view = held_by(&[("b", &[0, 1, 2, 3, 4]), ("c", &[])]);
        view.leases.insert(5.into(), lease(5, Some("x"), NOW - 1));
        view.leases.insert(6.into(), lease(6, None, NOW - 10_000));

        let plan = acquisitions(&view, "me", &shards(16), &BTreeSet::new(), NOW, 0);

        // Then me takes 6 (16 / 3 rounded up), free ones first, the expired one last
        assert_eq!(plan.take.len(), 6);
        assert_eq!(plan.take[0], (6.into(), Expect::Counter(7)));
        assert!(!plan.take.iter().any(|(s, _)| s.shard == 5));
        assert!(!plan.take.iter().any(|(s, _)| s.shard < 5));
    }

    #[test]
    fn an_expired_lease_is_taken_with_its_counter_when_nothing_is_free() {
        // Given a holds 0-7 (live), b died holding 8-15 (leases and heartbeat expired)
        let mut view = held_by(&[("a", &[0, 1, 2, 3, 4, 5, 6, 7])]);
        for shard in 8..16 {
            view.leases
                .insert(shard.into(), lease(shard, Some("b"), NOW - 1));
        }
        view.heartbeats.insert("b".into(), heartbeat("b", NOW - 1));
        let mine: BTreeSet<PendingPartition> = (0..8).map(PendingPartition::from).collect();

        let plan = acquisitions(&view, "a", &shards(16), &mine, NOW, 0);

        // Then a alone is live and takes all 8, each expecting the counter it read
        assert_eq!(plan.take.len(), 8);
        assert!(
            plan.take
                .iter()
                .all(|(s, e)| s.shard >= 8 && *e == Expect::Counter(7))
        );
    }

    #[test]
    fn rotation_spreads_pollers_that_start_together() {
        let view = held_by(&[("a", &[]), ("b", &[])]);

        let first = acquisitions(&view, "me", &shards(12), &BTreeSet::new(), NOW, 0);
        let second = acquisitions(&view, "me", &shards(12), &BTreeSet::new(), NOW, 4);

        assert_eq!(first.take.len(), 4);
        let a: BTreeSet<u16> = first.take.iter().map(|(s, _)| s.shard).collect();
        let b: BTreeSet<u16> = second.take.iter().map(|(s, _)| s.shard).collect();
        assert!(a.is_disjoint(&b), "{a:?} {b:?}");
    }

    #[test]
    fn a_poller_below_its_share_asks_the_one_holding_the_most_for_one_lease() {
        // Given a 4th poller joining a, b, c holding 5, 5 and 6 of 16
        let view = held_by(&[
            ("a", &[0, 1, 2, 3, 4]),
            ("b", &[5, 6, 7, 8, 9]),
            ("c", &[10, 11, 12, 13, 14, 15]),
        ]);

        let plan = acquisitions(&view, "d", &shards(16), &BTreeSet::new(), NOW, 0);

        // Then it takes nothing and asks c (the most) for its highest shard
        assert!(plan.take.is_empty());
        assert_eq!(
            plan.steal,
            Some(Steal {
                partition: 15.into(),
                holder: "c".into()
            })
        );
    }

    #[test]
    fn at_most_one_request_is_open_at_a_time() {
        let mut view = held_by(&[("a", &[0, 1, 2, 3, 4, 5, 6, 7]), ("d", &[])]);
        view.leases.get_mut(&7.into()).unwrap().handoff_to = Some("d".into());

        let plan = acquisitions(&view, "d", &shards(8), &BTreeSet::new(), NOW, 0);

        assert_eq!(plan.steal, None);
    }

    #[test]
    fn an_even_split_is_left_alone() {
        // 16 over 3 is 6/5/5: nobody is below the low share of 5
        let view = held_by(&[
            ("a", &[0, 1, 2, 3, 4, 5]),
            ("b", &[6, 7, 8, 9, 10]),
            ("c", &[11, 12, 13, 14, 15]),
        ]);
        for (me, mine) in [("a", 0..6), ("b", 6..11), ("c", 11..16)] {
            let mine: BTreeSet<PendingPartition> = mine.map(PendingPartition::from).collect();
            let plan = acquisitions(&view, me, &shards(16), &mine, NOW, 0);
            assert_eq!(plan, Acquisitions::default(), "{me}");
        }
    }

    #[test]
    fn a_request_is_never_for_a_lease_only_one_more_than_mine() {
        // 7 over 3: a holds 3, b 2, c 2: c is at the low share of 2, nothing to ask
        let view = held_by(&[("a", &[0, 1, 2]), ("b", &[3, 4]), ("c", &[5, 6])]);
        let plan = acquisitions(&view, "c", &shards(7), &[5.into(), 6.into()].into(), NOW, 0);
        assert_eq!(plan.steal, None);
    }

    #[test]
    fn a_poller_without_heartbeat_is_asked_while_its_leases_last_and_then_they_are_taken() {
        // Given a's heartbeat expired while its leases are still fresh: it counts as live through
        // its leases, so it is asked; once its leases expire they are taken instead
        let mut view = held_by(&[("a", &[0, 1, 2, 3])]);
        view.heartbeats.clear();
        let plan = acquisitions(&view, "b", &shards(4), &BTreeSet::new(), NOW, 0);
        assert_eq!(plan.steal.map(|s| s.holder), Some("a".into()));

        let later = NOW + DURATION;
        let plan = acquisitions(&view, "b", &shards(4), &BTreeSet::new(), later, 0);
        assert_eq!(plan.take.len(), 4);
        assert_eq!(plan.steal, None);
    }

    #[test]
    fn a_holder_hands_over_only_to_a_live_poller_still_short() {
        let view = held_by(&[("a", &[0, 1, 2, 3, 4, 5]), ("b", &[6, 7])]);
        let all = shards(8);

        assert!(should_hand_over(&view, "a", 6, "b", &all, NOW));
        // b has since caught up (5 against 3 would not be more even)
        assert!(!should_hand_over(&view, "a", 3, "b", &all, NOW));
        // a requester whose heartbeat has expired is gone
        let mut gone = view.clone();
        gone.heartbeats
            .insert("ghost".into(), heartbeat("ghost", NOW - 1));
        assert!(!should_hand_over(&gone, "a", 6, "ghost", &all, NOW));
        // one the view does not know yet has just started (its request is newer than the view)
        assert!(should_hand_over(&view, "a", 6, "new", &all, NOW));
        assert!(!should_hand_over(&view, "a", 6, "a", &all, NOW));
    }
}
