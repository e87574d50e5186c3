//! The test tools refuse what AWS refuses where the emulator lets it pass or lets it take effect
//! ([`outbox_tests::dynamodb_rules`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, BatchStatementRequest};
use outbox_shared::schema::attr;
use outbox_tests::fault_proxy::{BATCH_EXECUTE_STATEMENT, FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A `BatchExecuteStatement` that takes the item `sk` out of the pending index, as a relay's mark
/// does.
fn mark(env: &TestEnv, sk: &str) -> BatchStatementRequest {
    BatchStatementRequest::builder()
        .statement(format!(
            r#"UPDATE "{}" SET "{}" = ? REMOVE "{}" WHERE "{}" = ? AND "{}" = ? AND "{}" IS NOT MISSING"#,
            env.table_name,
            attr::STATUS,
            attr::GSI1PK,
            attr::PK,
            attr::SK,
            attr::GSI1PK
        ))
        .parameters(s("PUBLISHED"))
        .parameters(s("USER#u"))
        .parameters(s(sk))
        .build()
        .unwrap()
}

/// The items still in the pending index (with a `GSI1PK`), by `SK`.
async fn pending(env: &TestEnv) -> Vec<String> {
    let mut pending: Vec<String> = env
        .scan_items()
        .await
        .iter()
        .filter(|item| item.contains_key(attr::GSI1PK))
        .map(|item| item[attr::SK].as_s().unwrap().clone())
        .collect();
    pending.sort();
    pending
}

#[tokio::test]
async fn the_fault_proxy_refuses_a_batch_execute_statement_as_dynamodb_does_before_it_runs() {
    // Given 26 pending items and the fault proxy, with no random faults, in front of the emulator
    let env = TestEnv::new().await;
    let keys: Vec<String> = (0..26).map(|i| format!("OUTBOX#{i:02}")).collect();
    for sk in &keys {
        let item: HashMap<String, AttributeValue> = [
            (attr::PK, s("USER#u")),
            (attr::SK, s(sk)),
            (attr::GSI1PK, s("OUTBOX#PENDING#0")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.put_raw_item(item).await;
    }
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;
    let client = env.dynamodb_through(&proxy);
    let too_many: Vec<_> = keys.iter().map(|sk| mark(&env, sk)).collect();
    let repeated = vec![
        mark(&env, &keys[0]),
        mark(&env, &keys[1]),
        mark(&env, &keys[0]),
    ];

    for statements in [too_many, repeated] {
        // When one call marks 26 of them, or names one of them twice
        let err = client
            .batch_execute_statement()
            .set_statements(Some(statements))
            .send()
            .await
            .unwrap_err()
            .into_service_error();

        // Then the whole call is refused with DynamoDB's ValidationException, and no statement
        // ran (DynamoDB Local answers the repeated item with the same error after running them)
        assert_eq!(err.code(), Some("ValidationException"), "{err:?}");
        assert_eq!(pending(&env).await, keys);
    }
    assert_eq!(proxy.counts_for(BATCH_EXECUTE_STATEMENT).invalid_calls, 2);
}
