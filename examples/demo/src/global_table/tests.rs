use super::*;

fn region(name: &str) -> Region {
    Region::new(name).unwrap()
}

fn delivery(event_id: &str, aggregate: &str, sequence: u64, arrived_ms: i64) -> Delivery {
    Delivery {
        event_id: event_id.to_owned(),
        aggregate_id: Some(aggregate.to_owned()),
        sequence: Some(sequence),
        latency_ms: None,
        arrived_ms: Some(arrived_ms),
        stored: None,
    }
}

fn written(orders: u64, ids: &[&str]) -> RegionWritten {
    RegionWritten {
        orders,
        event_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
    }
}

#[test]
fn counts_each_region_and_the_failover_from_the_arrivals() {
    // Given us-east-1 wrote u1, u2 (one order), eu-west-1 e1, e2 (one order), e3 and e4 (others)
    let (us, eu) = (region("us-east-1"), region("eu-west-1"));
    let in_us = written(1, &["u1", "u2"]);
    let in_eu = written(3, &["e1", "e2", "e3", "e4"]);
    // eu-west-1's relays stopped at 1000, adopted at 8000, restarted at 20000
    let timeline = Timeline {
        stopped_ms: 1_000,
        adopted_ms: Some(8_000),
        restarted_ms: 20_000,
        handed_back_ms: Some(27_500),
    };
    // When the target delivered: both up u1, e1; a straggler of eu-west-1's own relays e2 at
    // 1100; the adopter e3 at 9000 and e2 again at 9100; after the restart u2, e3 again; e4 never
    let deliveries = [
        delivery("u1", "U", 1, 100),
        delivery("e1", "E", 1, 200),
        delivery("e2", "E", 2, 1_100),
        delivery("e3", "E3", 1, 9_000),
        delivery("e2", "E", 2, 9_100),
        delivery("u2", "U", 2, 21_000),
        delivery("e3", "E3", 1, 22_000),
    ];
    let summary = summarize(&[(&us, &in_us), (&eu, &in_eu)], &deliveries, &timeline, &eu);

    // Then per region: written, published, duplicates, out of order, missing
    let row = |r: &RegionCounts| {
        (
            r.written,
            r.published,
            r.duplicates,
            r.out_of_order,
            r.missing,
        )
    };
    assert_eq!(row(&summary.regions[0]), (2, 2, 0, 0, 0));
    assert_eq!(row(&summary.regions[1]), (4, 3, 2, 0, 1));
    assert_eq!(row(&summary.overall), (6, 5, 2, 0, 1));
    assert_eq!(summary.overall.orders, 4);
    assert!(!succeeded(&summary));
    // And the failover: the first adopted publish is e3 (the straggler is before the adoption)
    let f = &summary.failover;
    assert_eq!(f.adopter.as_deref(), Some("us-east-1"));
    assert_eq!(f.adopted_after_ms, Some(7_000));
    assert_eq!(f.first_adopted_publish_ms, Some(8_000));
    assert_eq!(f.published_by_adopter, 1);
    assert_eq!(f.hand_back_after_ms, Some(7_500));
    assert_eq!(f.failover_after_ms, 6_000);
    // And each phase's duplicates against the events first delivered in it
    assert_eq!((f.steady.events, f.steady.duplicates), (2, 0));
    assert_eq!(
        (f.during_failover.events, f.during_failover.duplicates),
        (2, 1)
    );
    assert!((f.during_failover.percent - 50.0).abs() < f64::EPSILON);
    assert_eq!(
        (f.during_hand_back.events, f.during_hand_back.duplicates),
        (1, 1)
    );
}

#[test]
fn an_event_delivered_before_an_earlier_one_of_its_order_is_out_of_order() {
    // Given one order's two events, the second delivered first; and one the demo did not write
    let (us, eu) = (region("us-east-1"), region("eu-west-1"));
    let in_us = written(1, &["u1", "u2"]);
    let in_eu = written(0, &[]);
    let deliveries = [
        delivery("u2", "U", 2, 100),
        delivery("u1", "U", 1, 200),
        delivery("x", "X", 1, 300),
    ];
    let summary = summarize(
        &[(&us, &in_us), (&eu, &in_eu)],
        &deliveries,
        &Timeline::default(),
        &eu,
    );

    // Then it is counted, the run fails, and nobody adopted anything
    assert_eq!(summary.regions[0].out_of_order, 1);
    assert_eq!(summary.overall.out_of_order, 1);
    assert_eq!(summary.overall.missing, 0);
    assert_eq!(summary.unknown_delivered, 1);
    assert!(!succeeded(&summary));
    assert_eq!(summary.failover.adopter, None);
    assert_eq!(summary.failover.first_adopted_publish_ms, None);
}
