//! The CloudWatch Embedded Metric Format documents the relays write.

/// EMF: a metric's value array holds at most 100 values; CloudWatch rejects the document otherwise.
pub const MAX_VALUES_PER_METRIC: usize = 100;
/// EMF: a metric directive names at most 100 metrics; CloudWatch rejects the document otherwise.
pub const MAX_METRICS_PER_DIRECTIVE: usize = 100;
/// EMF: a dimension set holds at most 30 dimensions; CloudWatch rejects the document otherwise.
pub const MAX_DIMENSIONS_PER_SET: usize = 30;
/// EMF: a document is one CloudWatch Logs event: 256 KiB, the smaller of the limits the
/// specification has stated (1 MB in its current text).
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
