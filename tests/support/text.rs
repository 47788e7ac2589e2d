//! Waiting for text that shows up late, for both test suites (`tests/` and `e2e/`, which
//! includes this file by path).

use std::time::{Duration, Instant};

/// What `read` returns once it holds `needle`, or as it is after `within` (read every 20 ms).
/// For a server's log: lines reach the file up to about 20 ms after they are logged (the
/// server batches them).
pub async fn once_it_holds(read: impl Fn() -> String, needle: &str, within: Duration) -> String {
    let until = Instant::now() + within;
    loop {
        let text = read();
        if text.contains(needle) || Instant::now() >= until {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
