//! The integration and end-to-end tests, one binary (each extra test binary would link the whole
//! AWS SDK again): a module per area, each test with its own table, bus and queues on the local
//! emulators through [`outbox_tests::TestEnv`].

// libtest starts tests in name order: the `bootstrap` build (minutes: cargo-lambda builds for an
// explicit target, so the dependencies again) goes first, so it overlaps the emulator-bound tests
// instead of running after them.
mod bootstrap;
mod consumer_example;
mod consumer_helpers;
mod costs;
mod dead_letter_size;
mod demo;
mod duplicates;
mod harness;
mod infra_template;
mod operator_commands;
mod poller_drain;
mod poller_fleet;
mod poller_metrics;
mod poller_quota;
mod relay_faults;
mod relay_refused_calls;
mod relay_stream_deadline;
mod relay_stream_faults;
mod relay_stream_local;
mod relay_stream_quota;
mod role_calls;
mod stream_fixtures;
mod test_tools;
mod trace_context;
mod writer_create;
mod writer_occ;
