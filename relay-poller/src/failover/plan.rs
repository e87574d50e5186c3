//! The decisions of a region round, as pure functions of the region items (as this region's
//! replica holds them), the time, and what this poller saw in earlier rounds ([`Seen`]): which
//! regions are dead, which region adopts a dead one, when an adopter hands a region back, and which
//! regions' partitions this region publishes.

use std::collections::{BTreeMap, BTreeSet};

use outbox_shared::{GlobalTable, Region};

use super::{AdoptionChange, FailoverSettings, RegionView};
use crate::assignment::Millis;

/// A region's heartbeat counts as fresh (for the hand-back's hysteresis) while it is at most this
/// many rounds old: one or two lost writes do not restart the count.
pub const FRESH_ROUNDS: i64 = 3;

/// What this poller saw of the regions in earlier rounds (its memory, not the table's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Regions seen with no heartbeat at all, since when: one that never writes one is dead
    /// `--region-failover-after` after this poller first looked.
    pub missing_since: BTreeMap<Region, Millis>,
    /// Regions whose heartbeat has been fresh in every round since when: the hand-back waits for
    /// this to be [`FailoverSettings::hand_back_after`] old.
    pub fresh_since: BTreeMap<Region, Millis>,
}

impl Seen {
    /// Records what `view` shows at `now` of `table`'s regions and of every adopter it names.
    pub fn observe(
        &mut self,
        table: &GlobalTable,
        view: &RegionView,
        now: Millis,
        settings: &FailoverSettings,
    ) {
        let named: BTreeSet<&Region> = table
            .regions()
            .iter()
            .chain(view.adoptions.values().filter_map(|a| a.adopter.as_ref()))
            .collect();
        let fresh_for = (FRESH_ROUNDS * settings.interval_ms()).min(settings.failover_after_ms());
        for region in named {
            match view.heartbeats.get(region) {
                Some(beat) => {
                    self.missing_since.remove(region);
                    if now - beat.heartbeat_at < fresh_for {
                        self.fresh_since.entry(region.clone()).or_insert(now);
                    } else {
                        self.fresh_since.remove(region);
                    }
                }
                None => {
                    self.missing_since.entry(region.clone()).or_insert(now);
                    self.fresh_since.remove(region);
                }
            }
        }
    }
}

/// Whether `region` is dead at `now`: its heartbeat (or, without one, this poller's first look)
/// is `--region-failover-after` old. `me` is never dead to itself.
pub fn is_dead(
    view: &RegionView,
    seen: &Seen,
    me: &Region,
    region: &Region,
    now: Millis,
    settings: &FailoverSettings,
) -> bool {
    if region == me {
        return false;
    }
    let last = view
        .heartbeats
        .get(region)
        .map(|b| b.heartbeat_at)
        .or_else(|| seen.missing_since.get(region).copied())
        .unwrap_or(now);
    now - last >= settings.failover_after_ms()
}

/// The region that should adopt dead `region`: the first live one in `--regions` order after it
/// (wrapping round). Every region with the same view picks the same one, so two regions adopt at
/// once only when their views differ (replication latency, a cut link).
pub fn preferred_adopter<'a>(
    table: &'a GlobalTable,
    view: &RegionView,
    seen: &Seen,
    region: &Region,
    now: Millis,
    settings: &FailoverSettings,
) -> Option<&'a Region> {
    let regions = table.regions();
    let start = regions
        .iter()
        .position(|r| r == region)
        .map_or(0, |i| i + 1);
    (0..regions.len())
        .map(|i| &regions[(start + i) % regions.len()])
        .filter(|r| *r != region)
        .find(|r| !is_dead(view, seen, table.own(), r, now, settings))
}

/// A change this region makes to an adoption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Adopt a dead region (its own pollers stopped, or its adopter's did).
    Adopt(AdoptionChange),
    /// Hand an adopted region back: its heartbeat has been fresh for the hysteresis.
    HandBack(AdoptionChange),
    /// Publish this region's own partitions again: the region that adopted them is dead.
    Reclaim(AdoptionChange),
}

impl Decision {
    pub fn change(&self) -> &AdoptionChange {
        match self {
            Self::Adopt(c) | Self::HandBack(c) | Self::Reclaim(c) => c,
        }
    }
}

/// What this region (`table.own()`) changes at `now`:
/// - a dead region nobody live publishes (itself or its adopter dead) is adopted, by the
///   [`preferred_adopter`] only;
/// - a region this one adopted automatically is handed back once its heartbeat has been fresh
///   for [`FailoverSettings::hand_back_after`]; one an operator adopted stays until an operator
///   hands it back;
/// - this region's own partitions, adopted by a region now dead, are reclaimed.
pub fn decide(
    table: &GlobalTable,
    view: &RegionView,
    seen: &Seen,
    now: Millis,
    settings: &FailoverSettings,
) -> Vec<Decision> {
    let me = table.own();
    let dead = |region: &Region| is_dead(view, seen, me, region, now, settings);
    let change = |region: &Region, adopter: Option<&Region>| AdoptionChange {
        region: region.clone(),
        adopter: adopter.cloned(),
        expect: view.epoch_of(region),
        at: now,
        by_operator: false,
    };
    let mut decisions = Vec::new();
    for region in table.regions() {
        let adoption = view.adoptions.get(region);
        let adopter = adoption.and_then(|a| a.adopter.as_ref());
        if region == me {
            if let Some(adopter) = adopter.filter(|a| *a != me && dead(a)) {
                tracing::debug!(%adopter, "the region that adopted this one is dead");
                decisions.push(Decision::Reclaim(change(me, None)));
            }
            continue;
        }
        match adopter {
            Some(a) if a == me => {
                let by_operator = adoption.is_some_and(|a| a.by_operator);
                let healthy = seen
                    .fresh_since
                    .get(region)
                    .is_some_and(|since| now - since >= settings.hand_back_after_ms());
                if !by_operator && healthy {
                    decisions.push(Decision::HandBack(change(region, None)));
                }
            }
            publisher => {
                let publisher = publisher.unwrap_or(region);
                if dead(publisher)
                    && dead(region)
                    && preferred_adopter(table, view, seen, region, now, settings) == Some(me)
                {
                    decisions.push(Decision::Adopt(change(region, Some(me))));
                }
            }
        }
    }
    decisions
}

/// The regions whose partitions this region publishes at `now` by `view`: each one whose adoption
/// names it, and its own while no adoption names another region, from one round after the last
/// change (a hand-back's adopter marked its last events before it wrote the hand-back; the round
/// gives those marks time to arrive, as replication orders items independently).
pub fn served(
    table: &GlobalTable,
    view: &RegionView,
    now: Millis,
    settings: &FailoverSettings,
) -> BTreeSet<Region> {
    let me = table.own();
    let mut served = BTreeSet::new();
    let own_settled = match view.adoptions.get(me) {
        None => true,
        Some(a) => a.adopter.is_none() && now - a.changed_at >= settings.interval_ms(),
    };
    if own_settled {
        served.insert(me.clone());
    }
    served.extend(
        view.adoptions
            .values()
            .filter(|a| a.region != *me && a.adopter.as_ref() == Some(me))
            .map(|a| a.region.clone()),
    );
    served
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Adoption, RegionHeartbeat};
    use super::*;

    const NOW: Millis = 1_000_000;
    const AFTER: Millis = 6_000;
    const ROUND: Millis = 1_000;

    fn r(name: &str) -> Region {
        Region::new(name).unwrap()
    }

    fn settings() -> FailoverSettings {
        FailoverSettings::new(
            Duration::from_millis(AFTER as u64),
            Duration::from_millis(ROUND as u64),
        )
    }

    /// Three regions, seen from `own`.
    fn table(own: &str) -> GlobalTable {
        GlobalTable::new(
            r(own),
            vec![r("us-east-1"), r("eu-west-1"), r("ap-south-1")],
        )
        .unwrap()
    }

    fn beat(view: &mut RegionView, region: &str, at: Millis) {
        view.heartbeats.insert(
            r(region),
            RegionHeartbeat {
                region: r(region),
                heartbeat_at: at,
                owner: format!("poller-{region}"),
            },
        );
    }

    fn adopted(view: &mut RegionView, region: &str, adopter: Option<&str>, epoch: u64) {
        view.adoptions.insert(
            r(region),
            Adoption {
                region: r(region),
                adopter: adopter.map(r),
                epoch,
                changed_at: NOW - 10 * AFTER,
                by_operator: false,
            },
        );
    }

    /// Every region beating at `NOW`, except those listed as dead (last beat `AFTER` ago).
    fn all_up_but(dead: &[&str]) -> RegionView {
        let mut view = RegionView::default();
        for region in ["us-east-1", "eu-west-1", "ap-south-1"] {
            let at = if dead.contains(&region) {
                NOW - AFTER
            } else {
                NOW
            };
            beat(&mut view, region, at);
        }
        view
    }

    #[test]
    fn a_heartbeat_older_than_the_failover_time_is_a_dead_region() {
        let mut view = all_up_but(&["eu-west-1"]);
        beat(&mut view, "ap-south-1", NOW - AFTER + 1);
        let seen = Seen::default();
        let me = r("us-east-1");

        assert!(is_dead(
            &view,
            &seen,
            &me,
            &r("eu-west-1"),
            NOW,
            &settings()
        ));
        assert!(!is_dead(
            &view,
            &seen,
            &me,
            &r("ap-south-1"),
            NOW,
            &settings()
        ));
        // Never itself, whatever its item says.
        beat(&mut view, "us-east-1", NOW - 10 * AFTER);
        assert!(!is_dead(&view, &seen, &me, &me, NOW, &settings()));
    }

    #[test]
    fn a_region_without_a_heartbeat_is_dead_a_failover_time_after_the_first_look() {
        let table = table("us-east-1");
        let mut view = all_up_but(&[]);
        view.heartbeats.remove(&r("eu-west-1"));
        let mut seen = Seen::default();

        seen.observe(&table, &view, NOW, &settings());

        let me = table.own();
        assert!(!is_dead(
            &view,
            &seen,
            me,
            &r("eu-west-1"),
            NOW + AFTER - 1,
            &settings()
        ));
        assert!(is_dead(
            &view,
            &seen,
            me,
            &r("eu-west-1"),
            NOW + AFTER,
            &settings()
        ));
    }

    #[test]
    fn the_first_live_region_after_the_dead_one_adopts_it_and_no_other() {
        let view = all_up_but(&["eu-west-1"]);
        let seen = Seen::default();

        // After eu-west-1 in --regions order comes ap-south-1: it adopts; us-east-1 does not.
        let ap = decide(&table("ap-south-1"), &view, &seen, NOW, &settings());
        let us = decide(&table("us-east-1"), &view, &seen, NOW, &settings());

        assert_eq!(
            ap,
            [Decision::Adopt(AdoptionChange {
                region: r("eu-west-1"),
                adopter: Some(r("ap-south-1")),
                expect: None,
                at: NOW,
                by_operator: false,
            })]
        );
        assert!(us.is_empty(), "{us:?}");
        // With ap-south-1 dead too, us-east-1 is the first live one after each.
        let view = all_up_but(&["eu-west-1", "ap-south-1"]);
        let us = decide(&table("us-east-1"), &view, &seen, NOW, &settings());
        let regions: Vec<&Region> = us.iter().map(|d| &d.change().region).collect();
        assert_eq!(regions, [&r("eu-west-1"), &r("ap-south-1")]);
    }

    #[test]
    fn a_live_region_is_not_adopted_nor_one_a_live_region_adopted() {
        let mut view = all_up_but(&["eu-west-1"]);
        adopted(&mut view, "eu-west-1", Some("us-east-1"), 3);
        let seen = Seen::default();

        // ap-south-1 would be preferred, but us-east-1 (live) publishes eu-west-1 already.
        assert!(decide(&table("ap-south-1"), &view, &seen, NOW, &settings()).is_empty());
        assert!(
            decide(
                &table("us-east-1"),
                &all_up_but(&[]),
                &seen,
                NOW,
                &settings()
            )
            .is_empty()
        );
    }

    #[test]
    fn a_region_whose_adopter_died_is_adopted_again_with_the_next_epoch() {
        let mut view = all_up_but(&["eu-west-1", "ap-south-1"]);
        adopted(&mut view, "eu-west-1", Some("ap-south-1"), 3);
        let seen = Seen::default();

        let decisions = decide(&table("us-east-1"), &view, &seen, NOW, &settings());

        let adopt = decisions
            .iter()
            .find(|d| d.change().region == r("eu-west-1"))
            .expect("eu-west-1 adopted");
        assert!(matches!(adopt, Decision::Adopt(_)));
        assert_eq!(adopt.change().expect, Some(3));
        assert_eq!(adopt.change().next_epoch(), 4);
    }

    #[test]
    fn a_region_is_handed_back_once_its_heartbeat_was_fresh_for_the_hysteresis() {
        let table = table("us-east-1");
        let mut view = all_up_but(&[]);
        adopted(&mut view, "eu-west-1", Some("us-east-1"), 3);
        let mut seen = Seen::default();
        let settings = settings();

        // The returned region beats every round; the adopter hands back only after AFTER of it.
        let mut handed_back_at = None;
        for round in 0..20 {
            let now = NOW + round * ROUND;
            beat(&mut view, "eu-west-1", now);
            beat(&mut view, "ap-south-1", now);
            seen.observe(&table, &view, now, &settings);
            let decisions = decide(&table, &view, &seen, now, &settings);
            if let Some(Decision::HandBack(change)) = decisions.first() {
                assert_eq!(change.adopter, None);
                assert_eq!(change.expect, Some(3));
                handed_back_at = Some(now);
                break;
            }
            assert!(decisions.is_empty(), "{decisions:?}");
        }
        assert_eq!(handed_back_at, Some(NOW + AFTER));
    }

    #[test]
    fn a_flapping_region_restarts_the_hysteresis() {
        let table = table("us-east-1");
        let mut view = all_up_but(&[]);
        adopted(&mut view, "eu-west-1", Some("us-east-1"), 3);
        let mut seen = Seen::default();
        let settings = settings();
        seen.observe(&table, &view, NOW, &settings);

        // It stops beating for FRESH_ROUNDS rounds (not long enough to be dead again)...
        let gap = NOW + FRESH_ROUNDS * ROUND;
        beat(&mut view, "us-east-1", gap);
        beat(&mut view, "ap-south-1", gap);
        seen.observe(&table, &view, gap, &settings);
        assert_eq!(seen.fresh_since.get(&r("eu-west-1")), None);
        // ...then beats again: the count starts over.
        beat(&mut view, "eu-west-1", gap + ROUND);
        seen.observe(&table, &view, gap + ROUND, &settings);
        let now = gap + ROUND + AFTER - 1;
        beat(&mut view, "eu-west-1", now);
        beat(&mut view, "ap-south-1", now);
        seen.observe(&table, &view, now, &settings);
        assert!(decide(&table, &view, &seen, now, &settings).is_empty());
        beat(&mut view, "eu-west-1", now + 1);
        beat(&mut view, "ap-south-1", now + 1);
        seen.observe(&table, &view, now + 1, &settings);
        assert!(matches!(
            decide(&table, &view, &seen, now + 1, &settings).as_slice(),
            [Decision::HandBack(_)]
        ));
    }

    #[test]
    fn an_operators_adoption_is_not_handed_back_by_itself() {
        let table = table("us-east-1");
        let mut view = all_up_but(&[]);
        adopted(&mut view, "eu-west-1", Some("us-east-1"), 3);
        view.adoptions.get_mut(&r("eu-west-1")).unwrap().by_operator = true;
        let mut seen = Seen::default();
        seen.observe(&table, &view, NOW - 10 * AFTER, &settings());

        assert!(decide(&table, &view, &seen, NOW, &settings()).is_empty());
        assert_eq!(
            served(&table, &view, NOW, &settings()),
            [r("us-east-1"), r("eu-west-1")].into()
        );
    }

    #[test]
    fn a_region_adopted_by_a_dead_one_reclaims_its_own_partitions() {
        let mut view = all_up_but(&["ap-south-1"]);
        adopted(&mut view, "eu-west-1", Some("ap-south-1"), 5);
        let seen = Seen::default();

        let decisions = decide(&table("eu-west-1"), &view, &seen, NOW, &settings());

        assert_eq!(
            decisions,
            [Decision::Reclaim(AdoptionChange {
                region: r("eu-west-1"),
                adopter: None,
                expect: Some(5),
                at: NOW,
                by_operator: false,
            })]
        );
    }

    #[test]
    fn a_region_publishes_what_its_replica_says_it_does_and_its_own_only_when_not_adopted() {
        let us = table("us-east-1");
        let eu = table("eu-west-1");
        let mut view = all_up_but(&[]);
        assert_eq!(
            served(&us, &view, NOW, &settings()),
            [r("us-east-1")].into()
        );

        adopted(&mut view, "eu-west-1", Some("us-east-1"), 1);
        assert_eq!(
            served(&us, &view, NOW, &settings()),
            [r("us-east-1"), r("eu-west-1")].into()
        );
        // The adopted region, coming back, does not publish its own.
        assert_eq!(served(&eu, &view, NOW, &settings()), BTreeSet::new());

        // Handed back: it waits one round after the change, then publishes its own again.
        let back = view.adoptions.get_mut(&r("eu-west-1")).unwrap();
        back.adopter = None;
        back.changed_at = NOW;
        assert_eq!(
            served(&eu, &view, NOW + ROUND - 1, &settings()),
            BTreeSet::new()
        );
        assert_eq!(
            served(&eu, &view, NOW + ROUND, &settings()),
            [r("eu-west-1")].into()
        );
        assert_eq!(
            served(&us, &view, NOW, &settings()),
            [r("us-east-1")].into()
        );
    }
}
