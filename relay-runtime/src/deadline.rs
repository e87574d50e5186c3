//! When the work on one batch or page must stop: the one deadline both relays pass down.
//!
//! A [`Deadline`] has two times. No publish (a call, or a retry of one) starts at or after its
//! *publish-by* time: the stream relay's is its invocation's deadline less `DEADLINE_MARGIN`, the
//! poller's a lease's poll deadline. What runs after the last publish (the marks, the dead letters,
//! the hold writes) ends by its *finish-by* time: the stream relay's is its invocation's deadline
//! less [`RESPONSE_RESERVE`](Deadline::of_invocation), the poller has none. A call the finish-by
//! time cuts short failed as a call that got no answer does ([`Deadline::finish`]): retryable, and
//! a later attempt may find it done.

use std::future::Future;
use std::time::Duration;

use outbox_shared::SdkFailure;
use tokio::time::Instant;

/// No publish starts at or after `publish_by`; what follows ends by `finish_by`. Either may be
/// unbounded ([`Deadline::NONE`] is both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deadline {
    publish_by: Option<Instant>,
    finish_by: Option<Instant>,
}

impl Deadline {
    /// No deadline: every publish may start, every call may take as long as its SDK timeouts let
    /// it.
    pub const NONE: Self = Self {
        publish_by: None,
        finish_by: None,
    };

    /// A Lambda invocation's: no publish starts within `margin` of `deadline`, and what follows
    /// ends `reserve` before it (the time to return the response).
    pub fn of_invocation(deadline: Instant, margin: Duration, reserve: Duration) -> Self {
        let before = |by: Duration| deadline.checked_sub(by).unwrap_or_else(Instant::now);
        Self {
            publish_by: Some(before(margin)),
            finish_by: Some(before(reserve)),
        }
    }

    /// No publish starts at or after `at`; what follows is not bounded (the poller's pages: a
    /// lease's poll deadline stops new publishes, the marks of what was published still run).
    pub fn publish_by(at: Instant) -> Self {
        Self {
            publish_by: Some(at),
            finish_by: None,
        }
    }

    /// When publishing must stop, if ever.
    pub fn publish_until(&self) -> Option<Instant> {
        self.publish_by
    }

    /// Whether no publish may start any more.
    pub fn publish_passed(&self) -> bool {
        self.publish_by.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether a publish that would start `delay` from now (a retry after its backoff) still may.
    pub fn publish_allowed_after(&self, delay: Duration) -> bool {
        self.publish_by.is_none_or(|at| Instant::now() + delay < at)
    }

    /// `call`'s result, or, when the finish-by time comes first, `cut` of the failure of an
    /// `operation` cut short (the call is dropped: a request already sent may still take effect,
    /// which a later attempt finds already done).
    ///
    /// # Errors
    /// The call's own error, or `cut`'s when the deadline came first.
    pub async fn finish<T, E>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, E>>,
        cut: impl FnOnce(SdkFailure) -> E,
    ) -> Result<T, E> {
        let Some(at) = self.finish_by else {
            return call.await;
        };
        match tokio::time::timeout_at(at, call).await {
            Ok(result) => result,
            Err(_) => Err(cut(SdkFailure::incomplete(
                operation,
                "the deadline came before the call was answered",
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_invocation_publishes_until_its_margin_and_finishes_by_its_reserve() {
        // Given an invocation with 15 s left, a 12 s margin and a 500 ms reserve
        let start = Instant::now();
        let deadline = Deadline::of_invocation(
            start + Duration::from_secs(15),
            Duration::from_secs(12),
            Duration::from_millis(500),
        );

        // Then publishing may start for 3 s, a retry only if it starts before then
        assert_eq!(
            deadline.publish_until(),
            Some(start + Duration::from_secs(3))
        );
        assert!(!deadline.publish_passed());
        assert!(deadline.publish_allowed_after(Duration::from_secs(2)));
        assert!(!deadline.publish_allowed_after(Duration::from_secs(3)));

        // And a call still running at 14.5 s is cut short, as a retryable failure
        let slow = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, SdkFailure>(())
        };
        let cut = deadline
            .finish("UpdateItem", slow, |f| f)
            .await
            .unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(14_500));
        assert_eq!(cut.operation, "UpdateItem");
        assert!(cut.class.is_retryable());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(deadline.publish_passed());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_every_publish_may_start_and_every_call_ends_on_its_own() {
        let deadline = Deadline::NONE;
        assert!(!deadline.publish_passed());
        assert!(deadline.publish_allowed_after(Duration::from_secs(3600)));
        let slow = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, SdkFailure>(7)
        };
        assert_eq!(deadline.finish("UpdateItem", slow, |f| f).await.unwrap(), 7);
    }

    #[test]
    fn a_deadline_already_past_allows_no_publish() {
        let deadline = Deadline::of_invocation(
            Instant::now(),
            Duration::from_secs(12),
            Duration::from_millis(500),
        );
        assert!(deadline.publish_passed());
    }
}
