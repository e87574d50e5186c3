//! The integration and end-to-end tests, one binary (each extra test binary would link the whole
//! AWS SDK again): a module per area, each test with its own table, bus and queues on the local
//! emulators through [`outbox_tests::TestEnv`].

/// Runs `async fn $name(kind: TargetKind)` on every target kind, as the tests `$name::classic`,
/// `$name::custom` (the Custom Event Bus on the local double, into a FIFO sink queue), `$name::sns`
/// (a FIFO topic on moto, into a FIFO sink queue), `$name::sqs` (a FIFO queue on moto, the sink
/// itself) and `$name::kinesis` (a stream on moto, read back): one test body, every publisher
/// ([`outbox_tests::TestEnv::with_target`]).
macro_rules! on_every_target {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn classic() {
                super::$name(relay_runtime::TargetKind::Classic).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn custom() {
                super::$name(relay_runtime::TargetKind::Custom).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn sns() {
                super::$name(relay_runtime::TargetKind::Sns).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn sqs() {
                super::$name(relay_runtime::TargetKind::Sqs).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn kinesis() {
                super::$name(relay_runtime::TargetKind::Kinesis).await;
            }
        }
    };
}

/// Runs `async fn $name(kind: TargetKind)` on both bus kinds, as the tests `$name::classic` and
/// `$name::custom` (the Custom Event Bus on the local double, into a FIFO sink queue): for what
/// only the buses differ in (the X-Ray header, raw events), or an end-to-end path whose consumer
/// side is an EventBridge rule's.
macro_rules! on_both_buses {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn classic() {
                super::$name(relay_runtime::TargetKind::Classic).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn custom() {
                super::$name(relay_runtime::TargetKind::Custom).await;
            }
        }
    };
}

mod bootstrap;
mod claim_check;
mod config_reference;
mod consumer_batch;
mod consumer_bootstrap;
mod consumer_example;
mod consumer_helpers;
mod costs;
mod dead_letter_characters;
mod dead_letter_size;
mod demo;
mod discarded_batches;
mod duplicates;
mod global_tables;
mod harness;
mod hold_recovery;
mod infra_template;
mod misconfigured;
mod operator_commands;
mod poller_drain;
mod poller_fleet;
mod poller_metrics;
mod poller_quota;
mod preflight_check;
mod relay_faults;
mod relay_metrics;
mod relay_refused_calls;
mod relay_stream_deadline;
mod relay_stream_faults;
mod relay_stream_local;
mod relay_stream_quota;
mod role_calls;
mod sdk_codes;
mod stream_fixtures;
mod target_mismatch;
mod test_tools;
mod trace_context;
mod writer_create;
mod writer_occ;
