//! The medians criterion recorded in this run, read back so that a bench can print them as
//! ratios to its baseline.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// Where criterion writes its estimates: `$CRITERION_HOME`, else `<target>/criterion` with
/// `<target>` taken from this executable's path (`<target>/release/deps/admission-…`).
pub fn criterion_home() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return Some(h.into());
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(PathBuf::from(t).join("criterion"));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// The median (ns) criterion recorded for `group/function`, if written by this process.
pub fn median_ns(home: &Path, group: &str, function: &str, since: SystemTime) -> Option<f64> {
    let path = home.join(group).join(function).join("new/estimates.json");
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < since {
        return None;
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}
