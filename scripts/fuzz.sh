#!/usr/bin/env bash
# Runs a fuzz target (fuzz/fuzz_targets/: `review` over raw AdmissionReview bytes, `pod` over
# structured pods) with libFuzzer, installing the pinned cargo-fuzz into .tools/ on first use.
#
#   scripts/fuzz.sh review -runs=1000000        # extra arguments go to libFuzzer
#
# New inputs that raise coverage are written into fuzz/corpus/<target>/, which the test suite
# replays (tests/engine/fuzz_corpus.rs); crashes go to fuzz/artifacts/<target>/. The stable toolchain
# builds the target (RUSTC_BOOTSTRAP for libFuzzer's flags); no sanitizer is needed, the crate
# forbids unsafe code and the checks are assertions.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.13.2
prefix="$root/.tools/cargo-fuzz-$version"
if [ ! -x "$prefix/bin/cargo-fuzz" ]; then
  echo "installing cargo-fuzz $version into .tools/ ..." >&2
  cargo install cargo-fuzz --version "$version" --locked --root "$prefix" >&2
fi
target="${1:?usage: scripts/fuzz.sh review|pod [libFuzzer options]}"
shift
cd "$root"
export PATH="$prefix/bin:$PATH" RUSTC_BOOTSTRAP=1
exec cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" -- -rss_limit_mb=2048 "$@"
