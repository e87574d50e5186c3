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
        "invalid --event-bus-name (EVENT_BUS_NAME): must not be empty"
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
        assert_eq!(err.flag, "--event-bus-name", "{refused}");
        assert!(
            err.to_string()
                .starts_with("invalid --event-bus-name (EVENT_BUS_NAME): must be"),
            "{err}"
        );
    }
}

const CUSTOM_ARN: &str =
    "arn:aws:events:eu-west-1:123456789012:event-busv2/orders-bus/abcdefghij0123456789klmno";

#[test]
fn the_bus_kind_is_classic_unless_set_to_custom() {
    // Given no kind, then kind custom with a Custom Event Bus ARN
    let classic = parse(&[]).config().unwrap();
    let custom = parse(&["--event-bus-kind", "custom", "--event-bus-name", CUSTOM_ARN])
        .config()
        .unwrap();

    // Then the classic bus keeps its defaults, and the custom one takes 100 entries a call
    assert_eq!(classic.bus_kind, BusKind::Classic);
    assert_eq!(classic.max_entries_per_call, 10);
    assert_eq!(custom.bus_kind, BusKind::Custom);
    assert_eq!(custom.max_entries_per_call, 100);
    assert_eq!(custom.max_request_bytes, 256 * 1024);
    assert_eq!(
        custom,
        PublisherConfig::of_kind(BusKind::Custom, CUSTOM_ARN, "orders")
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
            "--event-bus-name",
            "EVENT_BUS_NAME",
            "--event-bus-kind",
            "EVENT_BUS_KIND",
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
        let config = PublisherConfig::of_kind(BusKind::Custom, accepted, "orders");
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
        let config = PublisherConfig::of_kind(BusKind::Custom, refused, "orders");
        assert!(config.validate().is_err(), "{refused}");
    }
    let reserved = PublisherConfig::of_kind(BusKind::Custom, CUSTOM_ARN, "aws.orders");
    assert_eq!(reserved.validate().unwrap_err().flag, "--source");
    let long = PublisherConfig::of_kind(BusKind::Custom, CUSTOM_ARN, "a".repeat(257));
    assert_eq!(
        long.validate().unwrap_err().to_string(),
        "invalid --source (EVENT_SOURCE): must have at most 256 characters on the Custom Event \
         Bus, got 257"
    );
    let mut too_many = PublisherConfig::of_kind(BusKind::Custom, CUSTOM_ARN, "orders");
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
        (BusKind::Classic, "orders-bus"),
        (BusKind::Custom, CUSTOM_ARN),
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
        let config = PublisherConfig::of_kind(BusKind::Classic, "orders-bus", source);
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
        (
            &["--event-bus-name", ""][..],
            "--event-bus-name",
            "EVENT_BUS_NAME",
        ),
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

#[test]
fn with_cloudevents_the_source_must_be_a_uri_reference() {
    let mut config = PublisherConfig::new("bus", "orders service");
    config.validate().unwrap();
    config.event_format = EventFormat::CloudEvents;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.starts_with("invalid --source (EVENT_SOURCE)"), "{err}");
    assert!(err.contains("URI-reference"), "{err}");
}
