//! The build facts: the build script's parsing and date arithmetic (`build/info.rs`), and
//! `otel-injector --version` / `-V` as the built binary prints them.

#[path = "../../build/info.rs"]
mod info;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_otel-injector");

#[test]
fn commit_ids_are_40_lowercase_hex_digits() {
    let id = "ec027e1a0f3c2b4d5e6f708192a3b4c5d6e7f809";
    assert_eq!(info::commit(id).as_deref(), Some(id));
    assert_eq!(info::commit(&format!("{id}\n")).as_deref(), Some(id));
    assert_eq!(info::commit(""), None);
    assert_eq!(info::commit("ec027e1"), None);
    assert_eq!(info::commit(&id.to_uppercase()), None);
    assert_eq!(info::commit(&format!("{}g", &id[..39])), None);
    assert_eq!(
        info::commit("fatal: not a git repository (or any of the parent directories): .git"),
        None
    );
}

#[test]
fn rustc_version_is_the_number_of_the_first_line() {
    assert_eq!(
        info::rustc_version("rustc 1.95.0 (59807616e 2026-04-14)\n").as_deref(),
        Some("1.95.0")
    );
    assert_eq!(
        info::rustc_version("rustc 1.97.0-nightly (0123456ab 2026-06-01)").as_deref(),
        Some("1.97.0-nightly")
    );
    assert_eq!(info::rustc_version(""), None);
    assert_eq!(info::rustc_version("cargo 1.95.0"), None);
    assert_eq!(info::rustc_version("rustc "), None);
}

#[test]
fn dates_are_rfc3339_utc() {
    for (unix, date) in [
        (0, "1970-01-01T00:00:00Z"),
        (59, "1970-01-01T00:00:59Z"),
        (86_399, "1970-01-01T23:59:59Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (951_868_800, "2000-03-01T00:00:00Z"),
        (1_709_164_800, "2024-02-29T00:00:00Z"),
        (4_107_542_400, "2100-03-01T00:00:00Z"),
        (4_102_444_799, "2099-12-31T23:59:59Z"),
        (1_796_092_218, "2026-12-01T02:30:18Z"),
        (253_402_300_799, "9999-12-31T23:59:59Z"),
    ] {
        assert_eq!(info::rfc3339(unix), date, "{unix}");
    }
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run otel-injector");
    assert!(out.status.success(), "{args:?}: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// `git rev-parse HEAD` as the build script saw it (`unknown` outside a checkout), unless
/// the build was told otherwise.
fn expected_commit() -> String {
    if let Some(v) = option_env!("OTEL_INJECTOR_GIT_COMMIT").filter(|v| !v.trim().is_empty()) {
        return v.trim().to_owned();
    }
    Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8(o.stdout).unwrap().trim().to_owned(),
        )
}

#[test]
fn version_names_the_commit_date_compiler_and_target() {
    assert_eq!(
        run(&["-V"]),
        format!("otel-injector {}\n", env!("CARGO_PKG_VERSION"))
    );
    let long = run(&["--version"]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 5, "{long}");
    assert_eq!(
        lines[0],
        format!("otel-injector {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(lines[1], format!("commit: {}", expected_commit()));
    let date = lines[2].strip_prefix("built:  ").expect(lines[2]);
    let epoch = option_env!("OTEL_INJECTOR_SOURCE_DATE_EPOCH")
        .filter(|v| !v.trim().is_empty())
        .or(option_env!("SOURCE_DATE_EPOCH").filter(|v| !v.trim().is_empty()));
    match epoch {
        Some(epoch) => assert_eq!(date, info::rfc3339(epoch.trim().parse().unwrap())),
        None => {
            // The build's own clock: a timestamp between the first commit's year and now.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            assert_eq!(date.len(), "2026-01-01T00:00:00Z".len(), "{date}");
            assert!(date.ends_with('Z') && date.as_bytes()[10] == b'T', "{date}");
            assert!(
                date <= info::rfc3339(now).as_str(),
                "{date} is in the future"
            );
            assert!(date >= "2026-01-01T00:00:00Z", "{date}");
        }
    }
    // The compiler that runs the tests is the pinned one that built the binary.
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    assert_eq!(
        lines[3],
        format!("rustc:  {}", rustc.trim().strip_prefix("rustc ").unwrap())
    );
    let host = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8(host.stdout).unwrap();
    let host = host.lines().find_map(|l| l.strip_prefix("host: ")).unwrap();
    assert_eq!(lines[4], format!("target: {host}"));
}
