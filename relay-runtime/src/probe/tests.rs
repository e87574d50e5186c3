use super::*;
use outbox_shared::Misconfiguration;

fn place() -> Place {
    Place {
        region: "eu-west-1".into(),
        endpoint: "http://127.0.0.1:8000".into(),
        endpoint_variable: Some("AWS_ENDPOINT_URL_DYNAMODB".into()),
    }
}

#[test]
fn a_missing_table_is_one_line_naming_it_its_setting_where_the_call_went_and_the_fix() {
    let unusable = Unusable {
        resource: Resource::new(Kind::Table, "NoSuchTable", "--table-name (TABLE_NAME)"),
        problem: Misconfiguration::Missing,
        place: place(),
        operation: "DescribeTable",
        code: Some("ResourceNotFoundException".into()),
        fix: Resource::new(Kind::Table, "NoSuchTable", "--table-name (TABLE_NAME)").create_fix(),
        failure: None,
    };

    let line = unusable.to_string();

    assert_eq!(
        line,
        "table NoSuchTable does not exist (set by --table-name (TABLE_NAME); region eu-west-1, \
         endpoint http://127.0.0.1:8000 (AWS_ENDPOINT_URL_DYNAMODB); DescribeTable: \
         ResourceNotFoundException): set --table-name (TABLE_NAME) to the stack's TableName \
         output, or create the table as infra/template.yaml declares OutboxTable"
    );
    assert!(!line.contains('\n'));
}

#[test]
fn a_refused_connection_says_which_variable_points_there() {
    let failure = outbox_shared::SdkFailure::part("DescribeTable", "Whatever", "refused");
    let unusable = Unusable::of_failure(
        Resource::new(Kind::Table, "t", "--table-name (TABLE_NAME)"),
        Misconfiguration::ConnectionRefused,
        place(),
        "dynamodb:DescribeTable",
        failure,
    );

    assert!(
        unusable
            .fix
            .starts_with("start the service AWS_ENDPOINT_URL_DYNAMODB points at"),
        "{}",
        unusable.fix
    );
    assert!(unusable.to_string().contains("nothing accepts connections"));
}

#[test]
fn access_denied_names_the_action_to_allow() {
    let failure = outbox_shared::SdkFailure::part("GetQueueAttributes", "AccessDenied", "no");
    let unusable = Unusable::of_failure(
        Resource::new(Kind::DeadLetterQueue, "http://q", "--dead-letter-queue-url"),
        Misconfiguration::AccessDenied,
        place(),
        "sqs:GetQueueAttributes",
        failure,
    );

    assert!(
        unusable
            .fix
            .starts_with("allow sqs:GetQueueAttributes on it")
    );
    assert!(
        unusable
            .finding()
            .contains("GetQueueAttributes: AccessDenied")
    );
}

/// An SNS topic of region us-west-2, named by `--target`.
fn topic_in_us_west_2() -> Resource {
    Resource::new(
        Kind::Topic,
        "arn:aws:sns:us-west-2:123456789012:orders",
        "--target (EVENT_TARGET)",
    )
}

#[test]
fn a_describe_failure_no_retry_fixes_stops_start_up_with_one_line() {
    // Given GetTopicAttributes answering InvalidParameter, as SNS answers a topic ARN of another
    // region (a code that names no misconfiguration of its own, and that no retry changes)
    let failure = outbox_shared::SdkFailure::part(
        "GetTopicAttributes",
        "InvalidParameter",
        "Invalid parameter: TopicArn",
    );

    // When the probe reads it
    let outcome = describe::outcome::<()>(
        Err(failure),
        &topic_in_us_west_2(),
        place,
        "sns:GetTopicAttributes",
    );

    // Then the process cannot use the topic: one line naming it, its setting, the region called
    // and the fix
    let unusable = outcome.expect_err("no retry fixes InvalidParameter");
    let line = unusable.to_string();
    assert_eq!(
        line,
        "topic arn:aws:sns:us-west-2:123456789012:orders is refused by its service (set by \
         --target (EVENT_TARGET); region eu-west-1, endpoint http://127.0.0.1:8000 \
         (AWS_ENDPOINT_URL_DYNAMODB); GetTopicAttributes: InvalidParameter): the topic is in \
         region us-west-2, the process calls region eu-west-1: set AWS_REGION to us-west-2 (the \
         stack's region), or set --target (EVENT_TARGET) to a topic in eu-west-1"
    );
    assert!(!line.contains('\n'));
}

#[test]
fn a_refusal_of_a_target_in_its_own_region_says_what_the_service_answered() {
    let resource = Resource::new(
        Kind::Topic,
        "arn:aws:sns:eu-west-1:123456789012:orders",
        "--target (EVENT_TARGET)",
    );
    let failure = outbox_shared::SdkFailure::part("GetTopicAttributes", "InvalidParameter", "no");

    let unusable =
        describe::outcome::<()>(Err(failure), &resource, place, "sns:GetTopicAttributes")
            .expect_err("a permanent code stops start-up");

    assert_eq!(
        unusable.fix,
        "set --target (EVENT_TARGET) to a topic this account may use in region eu-west-1 (the \
         service's answer: InvalidParameter); no retry changes it"
    );
}

#[test]
fn a_describe_failure_a_retry_may_fix_lets_the_process_start() {
    for code in [
        "Throttled",
        "ThrottlingException",
        "InternalError",
        "ServiceUnavailable",
    ] {
        let failure = outbox_shared::SdkFailure::part("GetTopicAttributes", code, "later");
        let failure = outbox_shared::SdkFailure {
            // SNS's own throttling code is its room's: classified there.
            class: outbox_shared::error::ErrorClass::Retryable,
            ..failure
        };

        let outcome = describe::outcome::<()>(
            Err(failure),
            &topic_in_us_west_2(),
            place,
            "sns:GetTopicAttributes",
        );

        assert!(
            matches!(outcome, Ok(Probed::Unknown(_))),
            "{code}: {outcome:?}"
        );
    }
}

#[test]
fn a_missing_topic_named_in_another_region_says_which_region_to_call() {
    // moto answers NotFound for a topic of another region (its topics are per region)
    let failure = outbox_shared::SdkFailure::part("GetTopicAttributes", "NotFound", "no topic");

    let unusable = describe::outcome::<()>(
        Err(failure),
        &topic_in_us_west_2(),
        place,
        "sns:GetTopicAttributes",
    )
    .expect_err("NotFound is no retry's");

    assert!(
        unusable
            .fix
            .starts_with("the topic is in region us-west-2, the process calls region eu-west-1"),
        "{}",
        unusable.fix
    );
}
