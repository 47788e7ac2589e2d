//! The conversions' share of a replica's memory: [`ConversionBudget`], which every
//! ConversionReview waits on for its share before its body is read (`webhook.rs`).

use std::sync::Arc;

/// The bytes of ConversionReviews converted at once, across all connections. A review costs
/// about twice its body while it is converted (the body, and the answer as it is written:
/// `crd::review`), so the conversions of one replica hold about 64 MiB at most, inside the
/// chart's 128 Mi limit with the rest of the process, however many the API server sends at
/// once (up to 10 while its watch cache warms up). A review waits for its share before its
/// body is read.
/// Twice the largest review accepted (`webhook::MAX_CONVERSION_BYTES`).
pub const CONVERSION_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// The bytes of ConversionReviews that may be converted at once, in KiB permits.
pub struct ConversionBudget {
    permits: Arc<tokio::sync::Semaphore>,
    /// How many permits there are: one review takes at most all of them.
    total: u32,
}

impl Default for ConversionBudget {
    fn default() -> Self {
        ConversionBudget::new(CONVERSION_BUDGET_BYTES)
    }
}

impl ConversionBudget {
    pub fn new(bytes: usize) -> Self {
        let total = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        ConversionBudget {
            permits: Arc::new(tokio::sync::Semaphore::new(total as usize)),
            total,
        }
    }

    /// A share of `bytes` (at most the whole budget, so a review never waits for more than
    /// there is), held until dropped.
    pub(super) async fn take(&self, bytes: usize) -> tokio::sync::OwnedSemaphorePermit {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.total);
        Arc::clone(&self.permits)
            .acquire_many_owned(kib)
            .await
            .expect("the budget is never closed")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::server::webhook::MAX_CONVERSION_BYTES;

    #[tokio::test]
    async fn conversions_wait_for_their_share_of_the_budget() {
        assert_eq!(CONVERSION_BUDGET_BYTES, 2 * MAX_CONVERSION_BYTES);
        // A budget smaller than the limit still lets the largest review run, alone.
        let small = ConversionBudget::new(1024 * 1024);
        let alone =
            tokio::time::timeout(Duration::from_millis(50), small.take(MAX_CONVERSION_BYTES));
        assert!(alone.await.is_ok());
        let budget = ConversionBudget::default();
        let wait = Duration::from_millis(50);
        let whole = budget.take(MAX_CONVERSION_BYTES).await;
        let half = budget.take(MAX_CONVERSION_BYTES).await;
        // The budget is spent: the next review waits, however small.
        assert!(tokio::time::timeout(wait, budget.take(1)).await.is_err());
        drop(half);
        let small = tokio::time::timeout(wait, budget.take(1)).await;
        assert!(small.is_ok(), "a share returned is taken again");
        // More than the whole budget takes the whole budget, and so still runs alone.
        drop((whole, small));
        let all = tokio::time::timeout(wait, budget.take(usize::MAX)).await;
        assert!(all.is_ok());
    }
}
