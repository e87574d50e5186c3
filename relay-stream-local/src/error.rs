//! Why the runner could not read the stream.

use relay_runtime::SettingError;
use relay_runtime::probe::Unusable;

/// The stream could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("table {table}: {message}")]
    NoStream { table: String, message: String },
    #[error("could not list the shards of {stream_arn}: {message}")]
    DescribeStream { stream_arn: String, message: String },
    #[error(transparent)]
    Config(#[from] SettingError),
    /// What the runner relies on cannot be used (`relay_runtime::probe`); boxed, as the
    /// rarest and largest.
    #[error(transparent)]
    Unusable(#[from] Box<Unusable>),
}
