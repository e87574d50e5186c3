use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    publisher: PublisherArgs,
}

fn parse(args: &[&str]) -> PublisherArgs {
    let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
    Cli::try_parse_from(base.iter().chain(args))
        .unwrap()
        .publisher
}

#[test]
fn defaults_are_valid() {
    PublisherConfig::new("bus", "orders").validate().unwrap();
    let config = parse(&[]).config().unwrap();
    assert_eq!(config, PublisherConfig::new("bus", "orders"));
    assert_eq!(config.max_attempts(), 5);
}

#[test]
fn errors_name_the_setting() {
    let mut p = PublisherConfig::new("bus", "orders");
    p.max_entries_per_call = 11;
    let err = p.validate().unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid --max-entries-per-call (MAX_ENTRIES_PER_CALL): must be between 1 and 10, got 11"
    );
    let err = PublisherConfig::new("", "orders").validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --target (EVENT_TARGET): must not be empty"
    );
    let mut p = PublisherConfig::new("bus", "orders");
    p.max_request_bytes = 1000;
    assert!(
        p.validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid --max-request-bytes (MAX_REQUEST_BYTES)")
    );
}

#[test]
fn a_bus_eventbridge_would_refuse_on_every_entry_is_refused_at_start() {
    for accepted in [
        "orders-bus",
        "default",
        "aws.partner/example.com/123/orders",
        "arn:aws:events:eu-west-1:123456789012:event-bus/orders-bus",
        "arn:aws-cn:events:cn-north-1:123456789012:event-bus/orders",
    ] {
        let config = PublisherConfig::new(accepted, "orders");
        assert_eq!(config.validate(), Ok(()), "{accepted}");
    }
    for refused in [
        "orders bus",
        "orders:bus",
        "arn:aws:events:eu-west-1:1234:event-bus/orders",
        "arn:aws:sqs:eu-west-1:123456789012:event-bus/orders",
        "arn:aws:events:eu-west-1:123456789012:rule/orders",
        &"b".repeat(1601),
    ] {
        let err = PublisherConfig::new(refused, "orders")
            .validate()
            .unwrap_err();
        assert_eq!(err.flag, "--target", "{refused}");
        assert!(
            err.to_string()
                .starts_with("invalid --target (EVENT_TARGET): must be"),
            "{err}"
        );
    }
}

const CUSTOM_ARN: &str =
    "arn:aws:events:eu-west-1:123456789012:event-busv2/orders-bus/abcdefghij0123456789klmno";

#[test]
fn the_target_kind_is_classic_unless_set_to_custom() {
    // Given no kind, then kind custom with a Custom Event Bus ARN
    let classic = parse(&[]).config().unwrap();
    let custom = parse(&["--event-bus-kind", "custom", "--event-bus-name", CUSTOM_ARN])
        .config()
        .unwrap();

    // Then the classic bus keeps its defaults, and the custom one takes 100 entries a call
    assert_eq!(classic.target_kind, TargetKind::Classic);
    assert_eq!(classic.max_entries_per_call, 10);
    assert_eq!(custom.target_kind, TargetKind::Custom);
    assert_eq!(custom.max_entries_per_call, 100);
    assert_eq!(custom.max_request_bytes, 256 * 1024);
    assert_eq!(
        custom,
        PublisherConfig::of_kind(TargetKind::Custom, CUSTOM_ARN, "orders")
    );
    let fifty = parse(&[
        "--event-bus-kind=custom",
        "--event-bus-name",
        CUSTOM_ARN,
        "--max-entries-per-call=50",
    ]);
    assert_eq!(fifty.config().unwrap().max_entries_per_call, 50);
}

#[test]
fn a_mistaken_bus_kind_names_the_setting_the_value_and_the_accepted_values() {
    // When the kind is neither classic nor custom
    let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
    let err = Cli::try_parse_from(base.iter().copied().chain(["--event-bus-kind", "fifo"]))
        .unwrap_err()
        .to_string();

    // Then the error names the flag, the variable, the value and both accepted values
    for part in [
        "--event-bus-kind",
        "EVENT_BUS_KIND",
        "\"fifo\"",
        "classic, custom",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
}

#[test]
fn a_bus_of_the_other_kind_is_refused_naming_both_settings() {
    // Given a Custom Event Bus ARN with kind classic, and a classic bus with kind custom
    let custom_arn_as_classic = parse(&["--event-bus-name", CUSTOM_ARN]).config();
    let classic_as_custom = parse(&["--event-bus-kind", "custom"]).config();
    let classic_arn_as_custom = parse(&[
        "--event-bus-kind",
        "custom",
        "--event-bus-name",
        "arn:aws:events:eu-west-1:123456789012:event-bus/orders",
    ])
    .config();

    // Then each is refused, naming the bus and the kind settings
    for result in [
        custom_arn_as_classic,
        classic_as_custom,
        classic_arn_as_custom,
    ] {
        let err = result.unwrap_err().to_string();
        for part in [
            "--target",
            "EVENT_TARGET",
            "--target-kind",
            "EVENT_TARGET_KIND",
        ] {
            assert!(err.contains(part), "{part} in {err}");
        }
    }
    // And a custom kind with something that is no bus at all says what an ARN looks like
    let err = parse(&["--event-bus-kind", "custom", "--event-bus-name", "a b"])
        .config()
        .unwrap_err()
        .to_string();
    assert!(err.contains("event-busv2/NAME/ID"), "{err}");
}

#[test]
fn custom_bus_arns_are_checked_as_the_bus_documents_them() {
    for accepted in [
        CUSTOM_ARN,
        "arn:aws-us-gov:events:us-gov-west-1:123456789012:event-busv2/o.r_d-1/abcdefghij0123456789klmno",
    ] {
        let config = PublisherConfig::of_kind(TargetKind::Custom, accepted, "orders");
        assert_eq!(config.validate(), Ok(()), "{accepted}");
    }
    for refused in [
        "arn:aws:events:eu-west-1:123456789012:event-busv2/orders-bus",
        "arn:aws:events:eu-west-1:123456789012:event-busv2/orders-bus/ABCDEFGHIJ0123456789KLMNO",
        "arn:aws:events:eu-west-1:123456789012:event-busv2/orders-bus/abc",
        "arn:aws:events:eu-west-1:123456789012:event-busv2/-orders/abcdefghij0123456789klmno",
        "arn:aws:events:eu-west-1:1234:event-busv2/orders/abcdefghij0123456789klmno",
        "arn:aws:sqs:eu-west-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno",
    ] {
        let config = PublisherConfig::of_kind(TargetKind::Custom, refused, "orders");
        assert!(config.validate().is_err(), "{refused}");
    }
    let reserved = PublisherConfig::of_kind(TargetKind::Custom, CUSTOM_ARN, "aws.orders");
    assert_eq!(reserved.validate().unwrap_err().flag, "--source");
    let long = PublisherConfig::of_kind(TargetKind::Custom, CUSTOM_ARN, "a".repeat(257));
    assert_eq!(
        long.validate().unwrap_err().to_string(),
        "invalid --source (EVENT_SOURCE): must have at most 256 characters on the Custom Event \
         Bus, got 257"
    );
    let mut too_many = PublisherConfig::of_kind(TargetKind::Custom, CUSTOM_ARN, "orders");
    too_many.max_entries_per_call = 101;
    assert_eq!(
        too_many.validate().unwrap_err().to_string(),
        "invalid --max-entries-per-call (MAX_ENTRIES_PER_CALL): must be between 1 and 100, got 101"
    );
}

#[test]
fn a_source_with_the_reserved_aws_prefix_is_refused_on_either_bus() {
    // Given a source in AWS's reserved `aws.` namespace, on each bus kind
    for (kind, bus) in [
        (TargetKind::Classic, "orders-bus"),
        (TargetKind::Custom, CUSTOM_ARN),
    ] {
        let config = PublisherConfig::of_kind(kind, bus, "aws.orders");

        // Then the relay refuses it at start, naming the setting and the value
        let err = config.validate().unwrap_err();
        assert_eq!(err.flag, "--source", "{kind}");
        assert_eq!(
            err.to_string(),
            "invalid --source (EVENT_SOURCE): must not start with \"aws.\", which EventBridge \
             reserves for AWS's services, got \"aws.orders\"",
            "{kind}"
        );
    }
    // And only the prefix is reserved
    for source in [
        "aws",
        "awsome.orders",
        "aws-orders",
        "AWS.orders",
        "com.aws.orders",
    ] {
        let config = PublisherConfig::of_kind(TargetKind::Classic, "orders-bus", source);
        assert!(config.validate().is_ok(), "{source}");
    }
}

#[test]
fn every_out_of_range_flag_is_named_with_its_variable() {
    for (args, flag, env) in [
        (
            &["--max-entries-per-call", "11"][..],
            "--max-entries-per-call",
            "MAX_ENTRIES_PER_CALL",
        ),
        (
            &["--max-entry-bytes", "2000000"][..],
            "--max-entry-bytes",
            "MAX_ENTRY_BYTES",
        ),
        (
            &["--max-request-bytes", "100"][..],
            "--max-request-bytes",
            "MAX_REQUEST_BYTES",
        ),
        (
            &["--publish-concurrency", "0"][..],
            "--publish-concurrency",
            "PUBLISH_CONCURRENCY",
        ),
        (
            &["--publish-max-attempts", "0"][..],
            "--publish-max-attempts",
            "PUBLISH_MAX_ATTEMPTS",
        ),
        (
            &["--publish-max-attempts", "101"][..],
            "--publish-max-attempts",
            "PUBLISH_MAX_ATTEMPTS",
        ),
        (&["--source", " "][..], "--source", "EVENT_SOURCE"),
        (&["--event-bus-name", ""][..], "--target", "EVENT_TARGET"),
        (&["--target", ""][..], "--target", "EVENT_TARGET"),
    ] {
        let err = parse(args).config().unwrap_err();
        assert_eq!(
            (err.flag.as_str(), err.env.as_str()),
            (flag, env),
            "{args:?}: {err}"
        );
        assert!(err.to_string().contains(env), "{err}");
    }
}

#[test]
fn the_publish_rate_ceiling_is_a_positive_number_of_entries_per_second() {
    assert_eq!(parse(&[]).config().unwrap().max_publish_rate, None);
    let config = parse(&["--max-publish-rate", "500"]).config().unwrap();
    assert_eq!(config.max_publish_rate, NonZeroU32::new(500));
    let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
    for bad in ["0", "-5", "fast"] {
        let flag = format!("--max-publish-rate={bad}");
        let err = Cli::try_parse_from(base.iter().copied().chain([flag.as_str()]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--max-publish-rate"), "{bad}: {err}");
    }
}

#[test]
fn one_mebibyte_entries_are_accepted() {
    let config = parse(&[
        "--max-entry-bytes",
        "1048576",
        "--max-request-bytes",
        "1048576",
    ])
    .config()
    .unwrap();
    assert_eq!(config.max_entry_bytes, 1024 * 1024);
}

#[test]
fn blank_dead_letter_queue_urls_mean_none() {
    assert_eq!(dead_letter_queue_url(Some(" ")), None);
    assert_eq!(dead_letter_queue_url(None), None);
    assert_eq!(dead_letter_queue_url(Some("http://q")), Some("http://q"));
}

#[test]
fn the_event_format_is_the_envelope_unless_set_to_cloudevents() {
    // Given no format, then each accepted one
    assert_eq!(
        parse(&[]).config().unwrap().event_format,
        EventFormat::Envelope
    );
    let config = parse(&["--event-format", "cloudevents"]).config().unwrap();

    // Then a CloudEvent's source is the publisher's
    assert_eq!(config.encoding(), Encoding::cloudevents("orders"));

    // And any other value is refused naming the setting, the value and the accepted ones
    let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
    let err = Cli::try_parse_from(base.iter().copied().chain(["--event-format", "avro"]))
        .unwrap_err()
        .to_string();
    for part in [
        "--event-format",
        "EVENT_FORMAT",
        "\"avro\"",
        "envelope, cloudevents",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
}

const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:orders.fifo";
const QUEUE: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders";
const STREAM: &str = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders";

/// The publisher's flags without the base's bus, from `args`.
fn parse_only(args: &[&str]) -> Result<PublisherArgs, clap::Error> {
    Cli::try_parse_from(["relay", "--source", "orders"].iter().chain(args)).map(|c| c.publisher)
}

#[test]
fn each_target_kind_takes_its_target_and_its_limits() {
    // Given each kind with a target of its own
    for (kind, target, entries, entry_bytes, request_bytes) in [
        ("classic", "orders", 10, 256 * 1024, 256 * 1024),
        ("custom", CUSTOM_ARN, 100, 256 * 1024, 256 * 1024),
        ("sns", TOPIC, 10, 256 * 1024, 256 * 1024),
        ("sqs", QUEUE, 10, 256 * 1024, 256 * 1024),
        ("kinesis", STREAM, 500, 1024 * 1024, 5 * 1024 * 1024),
    ] {
        // When it is configured with the new settings
        let config = parse_only(&["--target-kind", kind, "--target", target])
            .unwrap()
            .config()
            .unwrap();

        // Then it has the kind's defaults
        assert_eq!(config.target_kind.to_string(), kind);
        assert_eq!(config.target, target);
        assert_eq!(
            (
                config.max_entries_per_call,
                config.max_entry_bytes,
                config.max_request_bytes
            ),
            (entries, entry_bytes, request_bytes),
            "{kind}"
        );
    }
    // And the largest sizes each kind takes are accepted, one byte more is not
    let kinesis = ["--target-kind", "kinesis", "--target", STREAM];
    let sqs = ["--target-kind", "sqs", "--target", QUEUE];
    let with =
        |base: &[&str], extra: &[&str]| parse_only(&[base, extra].concat()).unwrap().config();
    assert!(with(&kinesis, &["--max-request-bytes", "5242880"]).is_ok());
    assert!(with(&kinesis, &["--max-request-bytes", "5242881"]).is_err());
    assert!(with(&kinesis, &["--max-entries-per-call", "501"]).is_err());
    assert!(
        with(
            &sqs,
            &[
                "--max-entry-bytes",
                "1048576",
                "--max-request-bytes",
                "1048576"
            ]
        )
        .is_ok()
    );
    assert!(with(&sqs, &["--max-entries-per-call", "11"]).is_err());
}

#[test]
fn the_bus_settings_are_aliases_and_may_not_contradict_their_new_names() {
    // Given the aliases alone, the new names alone, and both set alike
    let alias = parse_only(&["--event-bus-kind", "custom", "--event-bus-name", CUSTOM_ARN]);
    let new = parse_only(&["--target-kind", "custom", "--target", CUSTOM_ARN]);
    let both = parse_only(&[
        "--target-kind",
        "custom",
        "--event-bus-kind",
        "custom",
        "--target",
        CUSTOM_ARN,
        "--event-bus-name",
        CUSTOM_ARN,
    ]);

    // Then they are the same configuration
    let expected = PublisherConfig::of_kind(TargetKind::Custom, CUSTOM_ARN, "orders");
    for args in [alias, new, both] {
        assert_eq!(args.unwrap().config().unwrap(), expected);
    }

    // And an alias set differently from its new name is refused naming both, with the values
    let kinds = parse_only(&[
        "--target-kind",
        "sqs",
        "--event-bus-kind",
        "classic",
        "--target",
        QUEUE,
    ])
    .unwrap()
    .config()
    .unwrap_err()
    .to_string();
    for part in [
        "--target-kind (EVENT_TARGET_KIND)",
        "--event-bus-kind (EVENT_BUS_KIND)",
        "Sqs",
        "Classic",
    ] {
        assert!(kinds.contains(part), "{part} in {kinds}");
    }
    let targets = parse_only(&["--target", "orders", "--event-bus-name", "other"])
        .unwrap()
        .config()
        .unwrap_err()
        .to_string();
    for part in [
        "--target (EVENT_TARGET)",
        "--event-bus-name (EVENT_BUS_NAME)",
        "\"orders\"",
        "\"other\"",
    ] {
        assert!(targets.contains(part), "{part} in {targets}");
    }
    // And neither set names the setting and its alias
    let missing = parse_only(&[]).unwrap().config().unwrap_err().to_string();
    assert_eq!(
        missing,
        "invalid --target (EVENT_TARGET): must be set (or its alias --event-bus-name \
         (EVENT_BUS_NAME), for a bus)"
    );
    // And the bus alias names buses only
    let err = parse_only(&["--event-bus-kind", "sns", "--target", TOPIC])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--event-bus-kind") && err.contains("--target-kind"),
        "{err}"
    );
}

#[test]
fn a_target_of_another_kind_than_named_is_refused_naming_the_setting_and_the_value() {
    // Given an SQS queue's URL for SNS, a topic for SQS, a stream for SNS, a queue for Kinesis
    for (kind, target, other) in [
        ("sns", QUEUE, "sqs"),
        ("sqs", TOPIC, "sns"),
        ("sns", STREAM, "kinesis"),
        ("kinesis", QUEUE, "sqs"),
        ("classic", TOPIC, "sns"),
    ] {
        let err = parse_only(&["--target-kind", kind, "--target", target])
            .unwrap()
            .config()
            .unwrap_err();

        // Then the relay refuses it at start, naming the setting, the value and the kind it is
        let message = err.to_string();
        assert_eq!(err.flag, "--target", "{message}");
        for part in [
            "--target (EVENT_TARGET)",
            &format!("{target:?}"),
            "--target-kind (EVENT_TARGET_KIND)",
            &format!("({other})"),
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
    }
    // And one that is no target at all says what the kind's target looks like, with the value
    let err = parse_only(&[
        "--target-kind",
        "sqs",
        "--target",
        "arn:aws:sqs:eu-west-1:123456789012:q",
    ])
    .unwrap()
    .config()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("queue's URL") && err.contains("arn:aws:sqs"),
        "{err}"
    );
    // And a mistaken kind names the value and every accepted kind
    let err = parse_only(&["--target-kind", "sns-fifo", "--target", TOPIC])
        .unwrap_err()
        .to_string();
    for part in [
        "--target-kind",
        "EVENT_TARGET_KIND",
        "\"sns-fifo\"",
        "classic, custom, sns, sqs, kinesis",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
}

#[test]
fn with_cloudevents_the_source_must_be_a_uri_reference() {
    let mut config = PublisherConfig::new("bus", "orders service");
    config.validate().unwrap();
    config.event_format = EventFormat::CloudEvents;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.starts_with("invalid --source (EVENT_SOURCE)"), "{err}");
    assert!(err.contains("URI-reference"), "{err}");
}

#[test]
fn the_entry_budget_is_the_smaller_of_the_setting_and_the_targets_own_limit() {
    // Given an SQS target at the 256 KiB default, with a payload threshold of 200 KB
    let config = PublisherConfig {
        payload_bucket: Some("payloads".into()),
        payload_threshold_bytes: Some(200_000),
        ..PublisherConfig::of_kind(
            TargetKind::Sqs,
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
            "test.orders",
        )
    };

    // When the queue's MaximumMessageSize is 4 KiB, the budget and the threshold are its
    let within = config.clone().within_target_limit(Some(4096));
    assert_eq!(within.max_entry_bytes, 4096);
    assert_eq!(within.payload_threshold(), 4096);
    within.validate().unwrap();

    // And a target that takes more, or says nothing, leaves the setting as it is
    assert_eq!(config.clone().within_target_limit(Some(1 << 20)), config);
    assert_eq!(config.clone().within_target_limit(None), config);
}

#[test]
fn regions_make_a_global_table_with_the_relays_own_region_among_them() {
    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        regions: RegionArgs,
    }
    let parse = |args: &[&str]| {
        <Cli as clap::Parser>::try_parse_from(["relay"].iter().chain(args)).map(|c| c.regions)
    };
    // Unset: a single-region table
    assert_eq!(
        parse(&[]).unwrap().global_table(Some("us-east-1")),
        Ok(None)
    );

    // Set: the table's regions, the relay's own from its SDK config
    let args = parse(&["--regions", "us-east-1,eu-west-1"]).unwrap();
    let table = args.global_table(Some("eu-west-1")).unwrap().unwrap();
    assert_eq!(table.own().as_str(), "eu-west-1");
    assert_eq!(table.regions().len(), 2);

    // Wrong: named with the flag and the variable, and why
    let err = args
        .global_table(Some("ap-south-1"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid --regions (OUTBOX_REGIONS): --regions (us-east-1,eu-west-1) does not include this relay's own region ap-south-1"),
        "{err}"
    );
    let err = args.global_table(None).unwrap_err().to_string();
    assert!(err.contains("set AWS_REGION"), "{err}");
    let err = parse(&["--regions", "us-east-1"])
        .unwrap()
        .global_table(Some("us-east-1"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least two regions"), "{err}");
    let err = parse(&["--regions", "us-east-1,EU"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"EU\" is not a region name"), "{err}");

    // Empty, as CloudFormation passes an unset parameter: a single-region table
    let empty = parse(&["--regions", ""]).unwrap();
    assert_eq!(empty.global_table(Some("us-east-1")), Ok(None));
}
