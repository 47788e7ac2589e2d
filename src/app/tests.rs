//! Tests of `app`.

use super::*;

#[test]
fn each_failure_carries_its_exit_code_and_message() {
    let input = Failure::from(offline::manifests::InputError::NoWorkload);
    assert_eq!(input.exit_code(), 1);
    assert_eq!(
        input.message(),
        Some(format!(
            "Error: {}",
            offline::manifests::InputError::NoWorkload
        ))
    );
    let skipped = Failure::from(Skipped(3));
    assert_eq!(skipped.exit_code(), 2);
    assert_eq!(
        skipped.message().as_deref(),
        Some("Error: 3 object(s) asked for a language that was not injected (--strict)")
    );
    let other = Failure::from(anyhow::anyhow!("inner").context("outer"));
    assert_eq!(other.exit_code(), 1);
    // (With RUST_BACKTRACE set, anyhow adds the backtrace after the causes.)
    assert!(
        other
            .message()
            .is_some_and(|m| m.starts_with("Error: outer\n\nCaused by:\n    inner")),
        "anything else is printed with its causes: {:?}",
        other.message()
    );
    let io = Failure::from(std::io::Error::other("disk"));
    assert_eq!(io.exit_code(), 1);
    assert!(io.message().is_some_and(|m| m.starts_with("Error: disk")));
}
