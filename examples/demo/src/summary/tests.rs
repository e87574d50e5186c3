use super::*;

#[test]
fn percentile_is_nearest_rank() {
    let values: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&values, 50), 50);
    assert_eq!(percentile(&values, 99), 99);
    assert_eq!(percentile(&[7], 99), 7);
    assert_eq!(percentile(&[], 50), 0);
}

#[test]
fn summary_counts_duplicates_and_missing() {
    let written = vec![
        "a".to_owned(),
        "b".to_owned(),
        "c".to_owned(),
        "d".to_owned(),
    ];
    let d = |id: &str, ms| Delivery {
        event_id: id.to_owned(),
        aggregate_id: Some(id.to_owned()),
        sequence: Some(1),
        latency_ms: Some(ms),
        arrived_ms: None,
        stored: None,
    };
    // Given "a" delivered twice (the consumer answered the second from its store), "b" and
    // the backfilled "c" once, "d" never; "l" a large order relayed apart, never delivered
    let deliveries = vec![d("a", 10), d("a", 50), d("b", 20), d("c", 9000)];
    let live: HashSet<String> = ["a", "b"].map(str::to_owned).into();
    let live_large: HashSet<String> = ["l"].map(str::to_owned).into();
    let lags: HashMap<String, u64> = [("a", 5), ("b", 7), ("c", 8000), ("l", 900)]
        .map(|(id, lag)| (id.to_owned(), lag))
        .into();
    let consumed = Consumed {
        received: 4,
        duplicates: 1,
        ..Consumed::default()
    };
    let s = summarize(
        &Written {
            target: TargetKind::Classic,
            orders: 4,
            all: &written,
            live: &live,
            live_large: &live_large,
            rate: 50,
            warm_up_orders: 0,
            large: &[],
        },
        &Delivered {
            deliveries: &deliveries,
            applied: &applied(&[("a", "a", 1), ("b", "b", 1), ("c", "c", 1)]),
            consumed: &consumed,
            order_restored: true,
            payloads: &PayloadChecks::default(),
        },
        &lags,
        &RelaySummary::default(),
        &RelaySummary::default(),
        0,
        Duration::from_secs(1),
    );
    // Then it counts them as delivered, and as the consumer received and applied them
    assert_eq!(
        (s.delivered, s.unique_delivered, s.duplicates, s.missing),
        (4, 3, 1, 1)
    );
    assert_eq!(
        (s.received, s.applied, s.applied_twice, s.not_applied),
        (4, 3, 0, 1)
    );
    assert!(s.order_restored);
    // Latencies are the live relay's: the backfilled event "c" is not among them, the large
    // order's are apart.
    assert_eq!((s.latency_p50_ms, s.latency_p99_ms), (10, 20));
    assert_eq!((s.relay_lag_p50_ms, s.relay_lag_p99_ms), (5, 7));
    assert_eq!(
        (s.large_relay_lag_p50_ms, s.large_relay_lag_p99_ms),
        (900, 900)
    );
    assert_eq!(s.rate, 50);
    assert_eq!(
        (
            s.orders,
            s.written,
            s.delivered_out_of_order,
            s.applied_out_of_order
        ),
        (4, 4, 0, 0)
    );
}

#[test]
fn summary_counts_the_large_orders_and_where_their_payloads_went() {
    // Given three large orders: one over an entry, whose payload a relay stored, two over an
    // item, whose payloads the writer stored; one of the three failed its check
    let large = |id: &str, kind| WrittenLarge {
        event_id: id.to_owned(),
        kind,
        lines: 1,
        lines_sha256: String::new(),
    };
    let written_large = [
        large("a", LargeOrder::OverEntry),
        large("b", LargeOrder::OverItem),
        large("c", LargeOrder::OverItem),
    ];
    let all = ["a", "b", "c"].map(str::to_owned);

    // When the run is summarized
    let s = summarize(
        &Written {
            target: TargetKind::Classic,
            orders: 3,
            all: &all,
            live: &HashSet::new(),
            live_large: &HashSet::new(),
            rate: 50,
            warm_up_orders: 0,
            large: &written_large,
        },
        &Delivered {
            deliveries: &[],
            applied: &[],
            consumed: &Consumed::default(),
            order_restored: false,
            payloads: &PayloadChecks {
                in_s3: 3,
                inline: 0,
                checked: 2,
                failures: vec!["event c: gone".to_owned()],
            },
        },
        &HashMap::new(),
        &RelaySummary {
            payloads_stored: 1,
            ..RelaySummary::default()
        },
        &RelaySummary::default(),
        0,
        Duration::from_secs(1),
    );

    // Then it says so
    assert_eq!(
        (
            s.large_orders,
            s.payloads_stored_by_writer,
            s.payloads_stored_by_relays
        ),
        (3, 2, 1)
    );
    assert_eq!(
        (
            s.large_delivered_in_s3,
            s.large_delivered_inline,
            s.payloads_checked,
            s.payload_failures
        ),
        (3, 0, 2, 1)
    );
}

/// Events `(event id, aggregate, sequence)` the consumer applied, in the order applied.
fn applied(events: &[(&str, &str, u64)]) -> Vec<Applied> {
    events
        .iter()
        .map(|(id, aggregate, sequence)| Applied {
            event_id: (*id).to_owned(),
            aggregate_id: Some((*aggregate).to_owned()),
            sequence: Some(*sequence),
        })
        .collect()
}

fn delivered_out_of_order(deliveries: &[Delivery]) -> u64 {
    out_of_order(deliveries.iter().map(Delivery::place))
}

/// Deliveries `(event id, aggregate, sequence)` in the order received.
fn received(events: &[(&str, &str, u64)]) -> Vec<Delivery> {
    events
        .iter()
        .map(|(id, aggregate, sequence)| Delivery {
            event_id: (*id).to_owned(),
            aggregate_id: Some((*aggregate).to_owned()),
            sequence: Some(*sequence),
            latency_ms: None,
            arrived_ms: None,
            stored: None,
        })
        .collect()
}

#[test]
fn out_of_order_counts_events_received_before_an_earlier_event_of_their_aggregate() {
    // In order per aggregate, aggregates interleaved: none
    let interleaved = received(&[
        ("a1", "a", 1),
        ("b1", "b", 1),
        ("a2", "a", 2),
        ("b2", "b", 2),
    ]);
    assert_eq!(delivered_out_of_order(&interleaved), 0);

    // a3 and a2 arrived before a1, and a3 before a2: two events early
    let reversed = received(&[("a3", "a", 3), ("a2", "a", 2), ("a1", "a", 1)]);
    assert_eq!(delivered_out_of_order(&reversed), 2);

    // a2 early (before a1); a3 after both is in order
    let one_swap = received(&[
        ("a2", "a", 2),
        ("a1", "a", 1),
        ("a3", "a", 3),
        ("b1", "b", 1),
    ]);
    assert_eq!(delivered_out_of_order(&one_swap), 1);
}

#[test]
fn a_repeated_delivery_is_a_duplicate_not_out_of_order() {
    // a1 delivered again after a2: its first delivery was in order
    let repeated = received(&[("a1", "a", 1), ("a2", "a", 2), ("a1", "a", 1)]);

    assert_eq!(delivered_out_of_order(&repeated), 0);
    let s = summarize(
        &Written {
            target: TargetKind::Custom,
            orders: 1,
            all: &["a1".to_owned(), "a2".to_owned()],
            live: &HashSet::new(),
            live_large: &HashSet::new(),
            rate: 50,
            warm_up_orders: 0,
            large: &[],
        },
        &Delivered {
            deliveries: &repeated,
            applied: &applied(&[("a1", "a", 1), ("a2", "a", 2)]),
            consumed: &Consumed {
                received: 3,
                duplicates: 1,
                ..Consumed::default()
            },
            order_restored: false,
            payloads: &PayloadChecks::default(),
        },
        &HashMap::new(),
        &RelaySummary {
            deduplicated: 2,
            ..RelaySummary::default()
        },
        &RelaySummary {
            deduplicated: 1,
            ..RelaySummary::default()
        },
        0,
        Duration::from_secs(1),
    );
    assert_eq!(
        (
            s.duplicates,
            s.delivered_out_of_order,
            s.applied_out_of_order,
            s.deduplicated
        ),
        (1, 0, 0, 3)
    );
    assert!(succeeded(&s));
}

#[test]
fn events_applied_out_of_order_or_twice_are_counted_and_fail_the_run() {
    // Given a consumer that applied a2 before a1, and a1 twice, though delivered in order
    let deliveries = received(&[("a1", "a", 1), ("a2", "a", 2)]);
    let summarize_applied = |events: &[(&str, &str, u64)]| {
        summarize(
            &Written {
                target: TargetKind::Classic,
                orders: 1,
                all: &["a1".to_owned(), "a2".to_owned()],
                live: &HashSet::new(),
                live_large: &HashSet::new(),
                rate: 50,
                warm_up_orders: 0,
                large: &[],
            },
            &Delivered {
                deliveries: &deliveries,
                applied: &applied(events),
                consumed: &Consumed::default(),
                order_restored: true,
                payloads: &PayloadChecks::default(),
            },
            &HashMap::new(),
            &RelaySummary::default(),
            &RelaySummary::default(),
            0,
            Duration::from_secs(1),
        )
    };
    let s = summarize_applied(&[("a2", "a", 2), ("a1", "a", 1), ("a1", "a", 1)]);

    // Then the summary says so, and the run failed
    assert_eq!(
        (
            s.delivered_out_of_order,
            s.applied_out_of_order,
            s.applied_twice,
            s.not_applied
        ),
        (0, 1, 1, 0)
    );
    assert!(!succeeded(&s));
    assert!(
        result(&s).contains("TWICE OR OUT OF ORDER"),
        "{}",
        result(&s)
    );

    // And one never applied fails it too; applied once each in order, it succeeds
    let s = summarize_applied(&[("a1", "a", 1)]);
    assert_eq!(s.not_applied, 1);
    assert!(!succeeded(&s));
    assert!(succeeded(&summarize_applied(&[
        ("a1", "a", 1),
        ("a2", "a", 2)
    ])));
}
