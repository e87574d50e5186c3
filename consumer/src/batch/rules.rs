//! Each source's partial-failure rule, apart from handling: which messages are handled after a
//! failure, and which identifiers the `batchItemFailures` response reports.
//!
//! From the Lambda developer guide:
//! - "Handling errors for an SQS event source in Lambda" (partial batch responses): on a
//!   standard queue the messages reported are returned to the queue and the rest deleted, so
//!   each failed message is reported and the others acknowledged ([`Semantics::Unordered`]). On
//!   a FIFO queue the function "should stop processing messages after the first failure and
//!   return all failed and unprocessed messages in batchItemFailures", so that no message group
//!   is processed out of order ([`FifoFailure::RestOfBatch`]); Powertools' `skip_group_on_error`
//!   keeps handling the other groups and holds back only the failed one's later messages
//!   ([`FifoFailure::Group`]), which keeps each group's order just as well.
//! - "Kinesis: ... batch item failures" (configuring partial batch response with Kinesis Data
//!   Streams): Lambda checkpoints at the lowest sequence number reported and retries the batch
//!   from it, so the first failed record is reported and no later record is handled in that
//!   invocation ([`Semantics::Stream`]); handling them would run them again on the retry.

use std::collections::HashSet;

/// What to hold back on a FIFO queue after a message fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FifoFailure {
    /// Every later message of the batch, whatever its group (AWS's guidance).
    #[default]
    RestOfBatch,
    /// Only the later messages of the failed message's group (Powertools' `skip_group_on_error`).
    Group,
}

/// How a source's batch fails in part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantics {
    /// SQS standard (and SNS through it): each message on its own.
    Unordered,
    /// SQS FIFO: a message group in order.
    Fifo(FifoFailure),
    /// Kinesis: the shard in order, checkpointed at the first failure.
    Stream,
}

/// The rule's state through one batch.
#[derive(Debug)]
pub(crate) struct Rules {
    semantics: Semantics,
    failed: bool,
    failed_groups: HashSet<String>,
}

impl Rules {
    pub(crate) fn new(semantics: Semantics) -> Self {
        Self {
            semantics,
            failed: false,
            failed_groups: HashSet::new(),
        }
    }

    /// Whether a message of `group` is held back unhandled, after the failures so far.
    pub(crate) fn holds_back(&self, group: Option<&str>) -> bool {
        match self.semantics {
            Semantics::Unordered => false,
            Semantics::Fifo(FifoFailure::RestOfBatch) | Semantics::Stream => self.failed,
            Semantics::Fifo(FifoFailure::Group) => {
                group.is_some_and(|g| self.failed_groups.contains(g))
            }
        }
    }

    /// A message of `group` failed.
    pub(crate) fn failed(&mut self, group: Option<&str>) {
        self.failed = true;
        if let Some(group) = group {
            self.failed_groups.insert(group.to_owned());
        }
    }

    /// Whether a message held back or failed is reported: every one but on a stream, where
    /// only the first failure is (Lambda retries from it, the later records with it).
    pub(crate) fn reports_every_failure(semantics: Semantics) -> bool {
        semantics != Semantics::Stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of `batch` (group, fails) are handled under `semantics`.
    fn handled(semantics: Semantics, batch: &[(&str, bool)]) -> Vec<usize> {
        let mut rules = Rules::new(semantics);
        let mut handled = Vec::new();
        for (i, (group, fails)) in batch.iter().enumerate() {
            if rules.holds_back(Some(group)) {
                continue;
            }
            handled.push(i);
            if *fails {
                rules.failed(Some(group));
            }
        }
        handled
    }

    const BATCH: [(&str, bool); 5] = [
        ("a", false),
        ("a", true),
        ("b", false),
        ("a", false),
        ("b", true),
    ];

    #[test]
    fn a_standard_queue_handles_every_message() {
        assert_eq!(handled(Semantics::Unordered, &BATCH), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_fifo_queue_holds_back_the_rest_of_the_batch_or_only_the_failed_group() {
        assert_eq!(
            handled(Semantics::Fifo(FifoFailure::RestOfBatch), &BATCH),
            [0, 1]
        );
        assert_eq!(
            handled(Semantics::Fifo(FifoFailure::Group), &BATCH),
            [0, 1, 2, 4]
        );
    }

    #[test]
    fn a_stream_stops_at_the_first_failure_and_reports_only_it() {
        assert_eq!(handled(Semantics::Stream, &BATCH), [0, 1]);
        assert!(!Rules::reports_every_failure(Semantics::Stream));
        assert!(Rules::reports_every_failure(Semantics::Unordered));
    }
}
