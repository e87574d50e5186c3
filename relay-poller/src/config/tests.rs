//! The command line as an operator types it: what each subcommand parses, its defaults, and the
//! validation errors that name the flag and its variable.

use super::*;
use clap::CommandFactory;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("relay-poller").chain(args.iter().copied()))
}

const RELAY: &[&str] = &[
    "--table-name",
    "t",
    "--event-bus-name",
    "bus",
    "--source",
    "orders",
    "--dead-letter-queue-url",
    "http://q",
];

fn drain_with(extra: &[&str]) -> Result<RelayConfig, SettingError> {
    let args: Vec<&str> = ["drain"]
        .iter()
        .chain(RELAY)
        .chain(extra)
        .copied()
        .collect();
    match parse(&args).unwrap().command {
        Command::Drain(d) => d.relay.validate(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn parses_shard_selections() {
    let s: ShardSelection = "0-3,8,10-11".parse().unwrap();
    assert_eq!(s.shards(), vec![0, 1, 2, 3, 8, 10, 11]);
    assert_eq!("5".parse::<ShardSelection>().unwrap().shards(), vec![5]);
    assert!("7-3".parse::<ShardSelection>().is_err());
    assert!("a-b".parse::<ShardSelection>().is_err());
    assert!("".parse::<ShardSelection>().is_err());
}

#[test]
fn defaults_poll_every_shard_of_gsi1() {
    let config = drain_with(&[]).unwrap();
    assert_eq!(config.index.shards, (0..16).collect::<Vec<_>>());
    assert_eq!(config.index.outbox.index_name, "GSI1");
    assert_eq!(config.publisher.max_entries_per_call, 10);
    assert_eq!(config.page_size, DEFAULT_PAGE_SIZE);
}

#[test]
fn shard_subset_must_exist() {
    let config = drain_with(&["--shard-count", "8", "--shards", "4-7"]).unwrap();
    assert_eq!(config.index.shards, vec![4, 5, 6, 7]);
    let err = drain_with(&["--shard-count", "8", "--shards", "4-8"]).unwrap_err();
    assert_eq!(err.flag, "--shards");
}

#[test]
fn errors_name_the_flag() {
    assert_eq!(
        drain_with(&["--page-size", "0"]).unwrap_err().flag,
        "--page-size"
    );
    assert_eq!(
        drain_with(&["--mark-concurrency", "0"]).unwrap_err().flag,
        "--mark-concurrency"
    );
    let args: Vec<&str> = ["drain", "--table-name", " "]
        .iter()
        .chain(&RELAY[2..])
        .copied()
        .collect();
    let Command::Drain(d) = parse(&args).unwrap().command else {
        panic!()
    };
    assert_eq!(d.relay.validate().unwrap_err().flag, "--table-name");
}

#[test]
fn publisher_flags_are_the_stream_relays_and_allow_one_mebibyte_entries() {
    // A backfill must publish whatever the stream relay publishes.
    let config = drain_with(&[
        "--max-entry-bytes",
        "1048576",
        "--max-request-bytes",
        "1048576",
        "--publish-concurrency",
        "4",
    ])
    .unwrap();
    assert_eq!(config.publisher.max_entry_bytes, 1024 * 1024);
    assert_eq!(config.publisher.max_concurrency, 4);
    let err = drain_with(&["--publish-concurrency", "0"]).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.env.as_str()),
        ("--publish-concurrency", "PUBLISH_CONCURRENCY")
    );
    let err = drain_with(&["--page-size", "0"]).unwrap_err();
    assert!(err.to_string().contains("OUTBOX_PAGE_SIZE"), "{err}");
}

#[test]
fn missing_and_malformed_flags_are_rejected_by_name() {
    let err = parse(&["drain", "--table-name", "t"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--source"), "{err}");
    // The target is a setting or its alias, so its absence is the configuration's to name
    let no_target = ["drain", "--table-name", "t", "--source", "orders"];
    let no_target: Vec<&str> = no_target
        .iter()
        .chain(&["--dead-letter-queue-url", "http://q"])
        .copied()
        .collect();
    let err = match parse(&no_target).unwrap().command {
        Command::Drain(d) => d.relay.validate().unwrap_err().to_string(),
        other => panic!("{other:?}"),
    };
    assert!(
        err.contains("--target (EVENT_TARGET)") && err.contains("--event-bus-name"),
        "{err}"
    );
    let err = parse(&["status", "--table-name", "t", "--shard-count", "0"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--shard-count"), "{err}");
    let err = parse(&["run", "--grace-period", "soon"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--grace-period"), "{err}");
}

#[test]
fn redrive_and_inspect_parse_their_filters() {
    let args: Vec<&str> = ["redrive"]
        .iter()
        .chain(RELAY)
        .chain(&[
            "--event-id",
            "a",
            "--event-id",
            "b",
            "--since",
            "2026-11-22T10:00:00Z",
            "--publish",
            "false",
            "--dry-run",
        ])
        .copied()
        .collect();
    let Command::Redrive(redrive) = parse(&args).unwrap().command else {
        panic!()
    };
    assert_eq!(redrive.event_ids, ["a", "b"]);
    assert!(!redrive.publish && redrive.dry_run && !redrive.from_table);
    assert_eq!(
        redrive.since.unwrap().to_rfc3339(),
        "2026-11-22T10:00:00+00:00"
    );
    let err = parse(&["redrive", "--since", "yesterday"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--since") && err.contains("RFC 3339"), "{err}");

    let Command::Inspect(inspect) = parse(&[
        "inspect",
        "--table-name",
        "t",
        "--key",
        "USER#u",
        "OUTBOX#e",
    ])
    .unwrap()
    .command
    else {
        panic!()
    };
    assert_eq!(inspect.key.unwrap(), ["USER#u", "OUTBOX#e"]);
    assert!(parse(&["inspect", "--table-name", "t"]).is_err());
}

#[test]
fn ttl_settings_are_checked_against_each_other() {
    let config = drain_with(&[]).unwrap();
    assert_eq!(config.ttl.published, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(config.ttl_refresh_margin, crate::DEFAULT_TTL_REFRESH_MARGIN);
    assert_eq!(config.sweep_interval, crate::DEFAULT_SWEEP_INTERVAL);
    let err =
        drain_with(&["--ttl-retention", "1day", "--ttl-refresh-margin", "2days"]).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.env.as_str()),
        ("--ttl-refresh-margin", "OUTBOX_TTL_REFRESH_MARGIN")
    );
    let err = drain_with(&["--ttl-retention", "0s"]).unwrap_err();
    assert_eq!(err.flag, "--ttl-retention");
    let err = drain_with(&["--sweep-interval", "0s"]).unwrap_err();
    assert_eq!(err.env, "OUTBOX_SWEEP_INTERVAL");
}

#[test]
fn duration_defaults_taken_from_the_poller_show_as_an_operator_writes_them() {
    let mut cli = Cli::command();
    for (subcommand, defaults) in [
        ("run", &["[default: 1day]", "[default: 5m]"][..]),
        ("status", &["[default: 1day]"][..]),
    ] {
        let help = cli
            .find_subcommand_mut(subcommand)
            .unwrap()
            .render_help()
            .to_string();
        for default in defaults {
            assert!(help.contains(default), "{subcommand}: {help}");
        }
    }
}

fn run_with(extra: &[&str]) -> RunArgs {
    let args: Vec<&str> = ["run"].iter().chain(RELAY).chain(extra).copied().collect();
    match parse(&args).unwrap().command {
        Command::Run(run) => run,
        other => panic!("{other:?}"),
    }
}

#[test]
fn without_a_lease_table_run_polls_its_shards_as_before() {
    let run = run_with(&["--shards", "0-3"]);
    assert_eq!(run.leases.settings(true).unwrap(), None);
    assert_eq!(run.relay.validate().unwrap().index.shards, [0, 1, 2, 3]);
    // An empty value (CloudFormation's unset parameter) is no table
    let run = run_with(&["--lease-table", ""]);
    assert_eq!(run.leases.settings(false).unwrap(), None);
}

#[test]
fn lease_settings_default_and_are_checked_against_each_other() {
    let run = run_with(&["--lease-table", "leases", "--create-lease-table"]);
    let settings = run.leases.settings(false).unwrap().unwrap();
    assert_eq!(settings.table_name, "leases");
    assert_eq!(settings.duration, crate::assignment::DEFAULT_LEASE_DURATION);
    assert_eq!(
        settings.renew_interval,
        crate::assignment::DEFAULT_RENEW_INTERVAL
    );
    assert!(settings.create_table);
    assert_eq!(settings.poll_window(), Duration::from_secs(20));

    let run = run_with(&[
        "--lease-table",
        "leases",
        "--lease-duration",
        "3s",
        "--lease-renew-interval",
        "1500ms",
    ]);
    let err = run.leases.settings(false).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.env.as_str()),
        ("--lease-renew-interval", "OUTBOX_LEASE_RENEW_INTERVAL")
    );
    assert!(err.to_string().contains("a third"), "{err}");

    let run = run_with(&["--lease-table", "leases", "--shards", "0-3"]);
    assert_eq!(run.leases.settings(true).unwrap_err().flag, "--shards");
}

#[test]
fn region_failover_defaults_to_a_minute_and_needs_three_renew_intervals() {
    let run = run_with(&["--lease-table", "leases"]);
    let failover = run.leases.failover().unwrap();
    assert_eq!(
        failover.failover_after,
        crate::failover::DEFAULT_FAILOVER_AFTER
    );
    assert_eq!(failover.hand_back_after, failover.failover_after);
    assert_eq!(failover.interval, crate::assignment::DEFAULT_RENEW_INTERVAL);

    let run = run_with(&["--lease-table", "leases", "--region-failover-after", "29s"]);
    let err = run.leases.failover().unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.env.as_str()),
        ("--region-failover-after", "OUTBOX_REGION_FAILOVER_AFTER")
    );
    assert!(
        err.to_string().contains("--lease-renew-interval (10s)"),
        "{err}"
    );
}

#[test]
fn drain_respects_leases_only_when_asked() {
    let drain = |extra: &[&str]| {
        let args: Vec<&str> = ["drain"]
            .iter()
            .chain(RELAY)
            .chain(extra)
            .copied()
            .collect();
        match parse(&args).unwrap().command {
            Command::Drain(d) => d,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        drain(&["--lease-table", "leases"])
            .respected_lease_table()
            .unwrap(),
        None
    );
    assert_eq!(
        drain(&["--lease-table", "leases", "--respect-leases"])
            .respected_lease_table()
            .unwrap(),
        Some("leases")
    );
    let err = drain(&["--respect-leases"])
        .respected_lease_table()
        .unwrap_err();
    assert_eq!(err.flag, "--respect-leases");
}

#[test]
fn grace_period_defaults_differ_by_mode() {
    let args: Vec<&str> = ["run"].iter().chain(RELAY).copied().collect();
    let Command::Run(run) = parse(&args).unwrap().command else {
        panic!()
    };
    assert_eq!(run.grace_period, Duration::from_secs(30));
    let args: Vec<&str> = ["drain"].iter().chain(RELAY).copied().collect();
    let Command::Drain(drain) = parse(&args).unwrap().command else {
        panic!()
    };
    assert_eq!(drain.grace_period, Duration::ZERO);
}
