//! Go-style durations (`10s`, `1m30s`, `500ms`, `1h`): the API server's `?timeout=` query
//! value and the duration flags read the same syntax.

use std::time::Duration;

/// Parses a sequence of `<digits><unit>` terms, units `h`, `m`, `s` and `ms`. `None` for an
/// empty string, a bare number, an unknown unit or an overflow.
pub fn parse(v: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        total = total.checked_add(match &rest[..unit] {
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            _ => return None,
        })?;
        rest = &rest[unit..];
    }
    Some(total)
}

/// Writes a duration in the syntax [`parse`] reads, whole units only (`5m`, `1m30s`, `1h`,
/// `250ms`; below a millisecond `0s`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_durations() {
        assert_eq!(parse("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse("1m0s"), Some(Duration::from_secs(60)));
        assert_eq!(parse("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse(" 2h "), Some(Duration::from_secs(7200)));
        assert_eq!(parse("10"), None);
        assert_eq!(parse("s"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("5d"), None);
        assert_eq!(parse("99999999999999999999h"), None);
    }

    #[test]
    fn durations_are_written_as_they_are_read() {
        for (d, text) in [
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_millis(1250), "1s250ms"),
            (Duration::from_micros(10), "0s"),
        ] {
            assert_eq!(format(d), text);
            assert_eq!(
                parse(text),
                Some(Duration::from_millis(d.as_millis() as u64))
            );
        }
    }

    /// Values only an attacker sends: every one is `None` or a plain value, never a panic.
    #[test]
    fn absurd_values_do_not_overflow() {
        let max = Duration::from_secs(u64::MAX);
        assert_eq!(parse("18446744073709551615s"), Some(max));
        assert_eq!(parse("18446744073709551615s1s"), None);
        assert_eq!(parse("18446744073709551616s"), None);
        assert_eq!(
            parse("18446744073709551615s999ms"),
            Some(max + Duration::from_millis(999))
        );
        assert_eq!(parse("18446744073709551615s1000ms"), None);
        assert_eq!(
            parse("18446744073709551615ms"),
            Some(Duration::from_millis(u64::MAX))
        );
        assert_eq!(
            parse("5124095576030431h"),
            Some(Duration::from_secs(5124095576030431 * 3600))
        );
        assert_eq!(parse("5124095576030432h"), None);
        assert_eq!(
            parse("307445734561825860m"),
            Some(Duration::from_secs(307445734561825860 * 60))
        );
        assert_eq!(parse("307445734561825861m"), None);
        assert_eq!(parse("5124095576030431h59m59s"), None);
        for junk in [
            "-1s", "1.5s", "1e3s", "+1s", "1s-", "1µs", "1 s", "٣s", "s1", "1ss", "ms",
        ] {
            assert_eq!(parse(junk), None, "{junk}");
        }
        let long = "9".repeat(10_000) + "s";
        assert_eq!(parse(&long), None);
        let many = "1s".repeat(10_000);
        assert_eq!(parse(&many), Some(Duration::from_secs(10_000)));
    }
}
