//! `relay-stream-local`: a local event source for the stream relay's handler, for the demo and the
//! tests (a crate of its own: the Lambda is the handler and its `main`).
//!
//! Reads the table's stream with `aws-sdk-dynamodbstreams` — every shard, parents before children,
//! from `trim-horizon` or `latest` — and delivers batches to the same
//! [`StreamRelay`](relay_stream::StreamRelay) the Lambda runs, with the event source mapping's
//! semantics: at most `batch_size` records per batch, a reported batch item failure re-delivers
//! from that sequence number, a bounded number of times, after which the batch is given up: with
//! `--discarded-batch-bucket`, written whole to that bucket as the mapping's S3 on-failure
//! destination writes it ([`on_failure`]).
//!
//! [`records`] converts `aws-sdk-dynamodbstreams` records to the Lambda event shape, so the reader
//! drives the very handler the Lambda runs.

mod args;
mod error;
pub mod on_failure;
mod read;
pub mod records;
mod run;
mod runner;

pub use args::{LocalArgs, MAX_BATCH_SIZE, RunnerOptions, StartingPosition};
pub use error::RunnerError;
pub use read::read_stream_records;
pub use relay_stream::handler::BATCH_HANDLED;
pub use run::{Summary, run, stream_arn_of};
pub use runner::{GET_RECORDS_MAX_LIMIT, LocalRunner, READING_SHARD};
