use chrono::TimeZone;

use super::*;

#[test]
fn selection_filters_by_id_type_and_time() {
    let at = |h| Utc.with_ymd_and_hms(2026, 11, 22, h, 0, 0).unwrap();
    let all = Selection::default();
    assert!(all.admits(None, None, None));
    let ids = Selection {
        event_ids: ["a".to_owned()].into(),
        ..Selection::default()
    };
    assert!(ids.admits(Some("a"), None, None));
    assert!(!ids.admits(Some("b"), None, None));
    assert!(!ids.admits(None, None, None));
    let typed = Selection {
        event_type: Some("OrderCreated".into()),
        ..Selection::default()
    };
    assert!(typed.admits(None, Some("OrderCreated"), None));
    assert!(!typed.admits(None, Some("OrderStatusChanged"), None));
    let window = Selection {
        since: Some(at(10)),
        until: Some(at(12)),
        ..Selection::default()
    };
    assert!(window.admits(None, None, Some("2026-11-22T10:00:00.000Z")));
    assert!(window.admits(None, None, Some("2026-11-22T11:59:59.999Z")));
    assert!(!window.admits(None, None, Some("2026-11-22T12:00:00.000Z")));
    assert!(!window.admits(None, None, Some("2026-11-22T09:59:59.999Z")));
    assert!(!window.admits(None, None, None));
}
