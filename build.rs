//! Build facts for `otel-injector --version` and the `otel_injector_build_info` metric, read
//! at build time without network:
//!
//! - commit: `OTEL_INJECTOR_GIT_COMMIT` (40 hex digits) when set and not empty, else
//!   `git rev-parse HEAD` in a checkout, else `unknown`;
//! - build date: `OTEL_INJECTOR_SOURCE_DATE_EPOCH`, else `SOURCE_DATE_EPOCH` (unix seconds,
//!   for reproducible builds) when set and not empty, else the time this script runs
//!   (scripts/image.sh sets the first: the `cc` crate's build scripts, ring's among them,
//!   rerun on a change of `SOURCE_DATE_EPOCH`, which would rebuild them at every commit);
//! - rustc: `$RUSTC --version`; target: the target triple.
//!
//! The script reruns only when one of those variables, this file, or the checked-out commit
//! changes (git's `HEAD` and the branch's ref), not on every build.

#[path = "build/info.rs"]
mod info;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/info.rs");
    println!("cargo:rerun-if-env-changed=OTEL_INJECTOR_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=OTEL_INJECTOR_SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    let commit = match non_empty_env("OTEL_INJECTOR_GIT_COMMIT") {
        Some(v) => info::commit(&v).unwrap_or_else(|| {
            panic!("OTEL_INJECTOR_GIT_COMMIT={v:?} is not a 40-digit lowercase hex commit id")
        }),
        None => git_commit().unwrap_or_else(|| "unknown".to_owned()),
    };
    let epoch = non_empty_env("OTEL_INJECTOR_SOURCE_DATE_EPOCH")
        .map(|v| ("OTEL_INJECTOR_SOURCE_DATE_EPOCH", v))
        .or_else(|| non_empty_env("SOURCE_DATE_EPOCH").map(|v| ("SOURCE_DATE_EPOCH", v)));
    let built = match epoch {
        Some((name, v)) => v
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a non-negative number of seconds")),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_secs(),
    };
    let rustc = std::env::var_os("RUSTC")
        .and_then(|rustc| Command::new(rustc).arg("--version").output().ok())
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    let rustc_version = info::rustc_version(&rustc).unwrap_or_else(|| "unknown".to_owned());
    let rustc_line = rustc
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("rustc "))
        .unwrap_or("unknown");
    let target = std::env::var("TARGET").expect("cargo sets TARGET");

    println!("cargo:rustc-env=OTEL_INJECTOR_BUILD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=OTEL_INJECTOR_BUILD_DATE={}",
        info::rfc3339(built)
    );
    println!("cargo:rustc-env=OTEL_INJECTOR_BUILD_RUSTC={rustc_line}");
    println!("cargo:rustc-env=OTEL_INJECTOR_BUILD_RUSTC_VERSION={rustc_version}");
    println!("cargo:rustc-env=OTEL_INJECTOR_BUILD_TARGET={target}");
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `git rev-parse HEAD` in the package's directory, and the files whose change means another
/// commit is checked out: `HEAD`, and the branch's ref (its loose file; if the ref is only in
/// `packed-refs`, that file and the ref's directory, where the next commit writes it).
fn git_commit() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = info::commit(&git(&["rev-parse", "HEAD"])?)?;
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() { p } else { dir.join(p) }
    };
    let git_dir = abs(git(&["rev-parse", "--git-dir"])?);
    watch(&git_dir.join("HEAD"));
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let common = abs(git(&["rev-parse", "--git-common-dir"])?);
        let loose = common.join(&reference);
        if loose.is_file() {
            watch(&loose);
        } else {
            watch(&common.join("packed-refs"));
            if let Some(parent) = loose.parent() {
                watch(parent);
            }
        }
    }
    Some(commit)
}

/// Reruns the script when `path` changes; a path that does not exist is not named (cargo
/// would then rerun the script on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
