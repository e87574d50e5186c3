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
