use aws_sdk_dynamodb::operation::batch_execute_statement::{
    BatchExecuteStatementInput, BatchExecuteStatementOutput,
};
use aws_sdk_dynamodb::types::{BatchStatementError, BatchStatementResponse};
use aws_smithy_mocks::{Rule, mock};

use super::*;

fn key(n: usize) -> ItemKey {
    ItemKey {
        pk: format!("ORDER#{n}"),
        sk: format!("EVENT#{n}"),
    }
}

/// A store whose `BatchExecuteStatement` calls answer by `rules`, in order; no SDK retries.
fn store(rules: &[&Rule]) -> DynamoStatusStore {
    let client = Client::from_conf(crate::mocked_dynamodb(rules).build());
    DynamoStatusStore::new(client, "outbox", TtlPolicy::default())
}

/// An answer with one response per code (`None`: the statement succeeded).
fn answer(codes: &[Option<BatchStatementErrorCodeEnum>]) -> BatchExecuteStatementOutput {
    let responses = codes
        .iter()
        .map(|code| {
            let mut response = BatchStatementResponse::builder().table_name("outbox");
            if let Some(code) = code {
                response = response.error(
                    BatchStatementError::builder()
                        .code(code.clone())
                        .message(format!("injected {code}"))
                        .build(),
                );
            }
            response.build()
        })
        .collect();
    BatchExecuteStatementOutput::builder()
        .set_responses(Some(responses))
        .build()
}

/// The keys a batch call names, from its statements' last two parameters.
fn keys_of(input: &BatchExecuteStatementInput) -> Vec<ItemKey> {
    input
        .statements()
        .iter()
        .map(|statement| {
            let parameters = statement.parameters();
            let s = |i: usize| parameters[i].as_s().unwrap().clone();
            ItemKey { pk: s(3), sk: s(4) }
        })
        .collect()
}

#[tokio::test]
async fn a_batch_marks_each_item_on_its_own_and_retries_only_what_may_succeed() {
    use BatchStatementErrorCodeEnum::{ConditionalCheckFailed, ThrottlingError, ValidationError};
    // Given a first call whose statements succeed, find one item done, are throttled and
    // refused, and a second call (the throttled one again) that succeeds
    let first = mock!(Client::batch_execute_statement)
        .match_requests(|input| keys_of(input) == [key(0), key(1), key(2), key(3)])
        .then_output(|| {
            answer(&[
                None,
                Some(ConditionalCheckFailed),
                Some(ThrottlingError),
                Some(ValidationError),
            ])
        });
    let retried = mock!(Client::batch_execute_statement)
        .match_requests(|input| keys_of(input) == [key(2)])
        .then_output(|| answer(&[None]));
    let store = store(&[&first, &retried]);

    // When four items are marked
    let keys: Vec<ItemKey> = (0..4).map(key).collect();
    let results = store.mark_published(&keys).await;

    // Then each has its own outcome: marked, already done, marked on the retry, and the
    // refused one an error naming its code, not retried
    assert_eq!(first.num_calls(), 1);
    assert_eq!(retried.num_calls(), 1);
    assert_eq!(results[0].as_ref().unwrap(), &MarkOutcome::Marked);
    assert_eq!(results[1].as_ref().unwrap(), &MarkOutcome::AlreadyMarked);
    assert_eq!(results[2].as_ref().unwrap(), &MarkOutcome::Marked);
    let refused = results[3].as_ref().unwrap_err();
    assert_eq!(refused.key, key(3));
    assert_eq!(refused.failure.operation, "BatchExecuteStatement");
    assert_eq!(refused.failure.code.as_deref(), Some("ValidationError"));
    assert!(!refused.class().is_retryable());
}

#[tokio::test]
async fn a_statement_throttled_on_every_attempt_is_a_retryable_error() {
    // Given a statement throttled on every attempt
    let throttled = mock!(Client::batch_execute_statement)
        .match_requests(|input| input.statements().len() == 1)
        .sequence()
        .output(|| answer(&[Some(BatchStatementErrorCodeEnum::ThrottlingError)]))
        .times(3)
        .build();
    let store = store(&[&throttled]);

    // When it is marked
    let results = store.mark_published(&[key(7)]).await;

    // Then it was tried three times, and is left pending with a retryable error
    assert_eq!(throttled.num_calls(), 3);
    let err = results[0].as_ref().unwrap_err();
    assert!(err.class().is_retryable(), "{err:?}");
    assert_eq!(err.failure.code.as_deref(), Some("ThrottlingError"));
}

#[tokio::test]
async fn a_failed_call_fails_every_mark_in_it_and_batches_hold_at_most_25() {
    // Given a first call that fails and a second that succeeds
    let failed = mock!(Client::batch_execute_statement)
        .match_requests(|input| input.statements().len() == MARK_BATCH_MAX)
        .then_http_response(|| {
            aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(500).unwrap(),
                aws_smithy_types::body::SdkBody::from(
                    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected"}"#,
                ),
            )
        });
    let rest = mock!(Client::batch_execute_statement)
        .match_requests(|input| input.statements().len() == 5)
        .then_output(|| answer(&vec![None; 5]));
    let store = store(&[&failed, &rest]);

    // When 30 items are marked
    let keys: Vec<ItemKey> = (0..30).map(key).collect();
    let results = store.mark_published(&keys).await;

    // Then the first 25 carry the call's retryable failure and the last 5 are marked
    assert_eq!(results.len(), 30);
    for (i, result) in results[..25].iter().enumerate() {
        let err = result.as_ref().unwrap_err();
        assert_eq!(err.key, key(i));
        assert!(err.class().is_retryable());
    }
    assert!(
        results[25..]
            .iter()
            .all(|r| r.as_ref().is_ok_and(|m| *m == MarkOutcome::Marked))
    );
}

#[tokio::test]
async fn a_key_repeated_in_a_batch_is_named_once_and_the_repeat_is_already_done() {
    let once = mock!(Client::batch_execute_statement)
        .match_requests(|input| keys_of(input) == [key(1), key(2)])
        .then_output(|| answer(&[None, None]));
    let store = store(&[&once]);

    let results = store.mark_published(&[key(1), key(2), key(1)]).await;

    assert_eq!(once.num_calls(), 1);
    let outcomes: Vec<MarkOutcome> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        outcomes,
        [
            MarkOutcome::Marked,
            MarkOutcome::Marked,
            MarkOutcome::AlreadyMarked
        ]
    );
}

#[test]
fn the_mark_statement_updates_and_conditions_as_update_item_does() {
    let statement = store(&[]).published_statement;
    assert_eq!(
        statement,
        r#"UPDATE "outbox" SET "Status" = ? SET "PublishedAt" = ? SET "ttl" = ? REMOVE "GSI1PK" REMOVE "GSI1SK" WHERE "PK" = ? AND "SK" = ? AND "GSI1PK" IS NOT MISSING"#
    );
    assert_eq!(
        mark_statement("outbox", OutboxStatus::DeadLettered),
        r#"UPDATE "outbox" SET "Status" = ? SET "DeadLetteredAt" = ? SET "ttl" = ? SET "DeadLetterReason" = ? REMOVE "GSI1PK" REMOVE "GSI1SK" WHERE "PK" = ? AND "SK" = ? AND "GSI1PK" IS NOT MISSING"#
    );
}

#[tokio::test]
async fn a_dead_letter_mark_is_one_statement_with_its_reason_cut_to_what_an_item_keeps() {
    // Given a reason longer than the item keeps, and a call that finds the item already marked
    let long_reason = "é".repeat(MAX_STORED_REASON_BYTES);
    let call = mock!(Client::batch_execute_statement)
        .match_requests(|input| {
            let parameters = input.statements()[0].parameters();
            input.statements().len() == 1
                && parameters[0].as_s().unwrap() == "DEAD_LETTERED"
                && parameters[3].as_s().unwrap().len() == MAX_STORED_REASON_BYTES
                && parameters[4].as_s().unwrap() == "ORDER#3"
                && parameters[5].as_s().unwrap() == "EVENT#3"
        })
        .then_output(|| answer(&[Some(BatchStatementErrorCodeEnum::ConditionalCheckFailed)]));
    let store = store(&[&call]);

    // When the item is marked dead-lettered
    let outcome = store.mark_dead_lettered(&key(3), &long_reason).await;

    // Then one statement went, with the reason cut on a character boundary, and finding the item
    // already out of the index is an outcome, not an error
    assert_eq!(call.num_calls(), 1);
    assert_eq!(outcome.unwrap(), MarkOutcome::AlreadyMarked);
}

#[test]
fn dead_lettered_items_outlive_the_dead_letter_queue() {
    let day = Duration::from_secs(24 * 60 * 60);
    let policy = TtlPolicy::new(7 * day);
    assert_eq!(policy.retention(OutboxStatus::Published), 7 * day);
    assert_eq!(policy.retention(OutboxStatus::DeadLettered), 15 * day);
    // A retention longer than the queue's wins for both.
    let long = TtlPolicy::new(30 * day);
    assert_eq!(long.retention(OutboxStatus::DeadLettered), 30 * day);
}

#[test]
fn truncate_respects_char_boundaries() {
    assert_eq!(truncate("héllo", 2), "h");
    assert_eq!(truncate("héllo", 3), "hé");
    assert_eq!(truncate("abc", 10), "abc");
}

#[test]
fn a_gone_items_image_goes_back_dead_lettered_out_of_the_index_kept_for_a_redrive() {
    // Given the last image of a pending item that TTL deleted
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let image: crate::recreate::Attributes = [
        (attr::PK, s("USER#u1")),
        (attr::SK, s("OUTBOX#e1")),
        (attr::EVENT_ID, s("e1")),
        (attr::PAYLOAD, s(r#"{"n":1}"#)),
        (attr::STATUS, s("PENDING")),
        (attr::CREATED_AT, s("2026-11-14T08:00:00.000Z")),
        (attr::GSI1PK, s("OUTBOX#PENDING#3")),
        (attr::GSI1SK, s("EVENT#2026-11-14T08:00:00.000Z#e1")),
        (attr::TTL, AttributeValue::N("1763107200".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let now = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 11, 22, 10, 0, 0).unwrap();
    let retention = TtlPolicy::default().dead_lettered;

    // When it is made the item to put back dead-lettered
    let reason = "é".repeat(MAX_STORED_REASON_BYTES);
    let item = dead_lettered_image(&image, &reason, now, retention);

    // Then it is DEAD_LETTERED, out of the pending index, with when and why (the reason cut as a
    // mark stores it), its ttl past the dead-letter queue's retention, and the event whole
    let text = |name: &str| item[name].as_s().unwrap().as_str();
    assert_eq!(text(attr::STATUS), "DEAD_LETTERED");
    assert!(!item.contains_key(attr::GSI1PK) && !item.contains_key(attr::GSI1SK));
    assert_eq!(text(attr::DEAD_LETTERED_AT), "2026-11-22T10:00:00.000Z");
    assert_eq!(
        text(attr::DEAD_LETTER_REASON).len(),
        MAX_STORED_REASON_BYTES
    );
    assert_eq!(
        item[attr::TTL].as_n().unwrap(),
        &ttl_after(now, retention).to_string()
    );
    for name in [
        attr::PK,
        attr::SK,
        attr::EVENT_ID,
        attr::PAYLOAD,
        attr::CREATED_AT,
    ] {
        assert_eq!(item[name], image[name], "{name}");
    }
    // And it names only what the role's put of a re-created item may
    let allowed = crate::permissions::Target::RecreatedItems
        .attributes()
        .unwrap();
    for name in item.keys() {
        assert!(allowed.contains(&name.as_str()), "{name}");
    }
}
