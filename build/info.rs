//! The pure part of the build script: turning what the build found (a git commit, a unix
//! time, `rustc --version`) into the strings that `--version` and `build_info` show. Shared by
//! `build.rs` and its unit tests (`tests/engine/build_info.rs`), so no process or clock is involved.

/// A 40-digit lowercase hex commit id, or `None` for anything else (an empty override, a
/// short or upper-case id, git's error text).
pub fn commit(raw: &str) -> Option<String> {
    let raw = raw.trim();
    (raw.len() == 40 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| raw.to_owned())
}

/// The version number of `rustc --version` output (`rustc 1.95.0 (59807616e 2026-04-14)`
/// gives `1.95.0`), or `None` when the line does not start with `rustc `.
pub fn rustc_version(output: &str) -> Option<String> {
    let line = output.lines().next()?;
    let version = line.strip_prefix("rustc ")?.split(' ').next()?;
    (!version.is_empty()).then(|| version.to_owned())
}

/// Unix seconds as an RFC 3339 UTC timestamp (`2026-12-01T02:30:18Z`), from the proleptic
/// Gregorian calendar; `SOURCE_DATE_EPOCH` is a non-negative integer, so no earlier date is
/// needed.
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The date `days` after 1970-01-01. Counts in 400-year eras starting on March 1st, so that
/// the leap day is the last day of its year.
fn civil(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}
