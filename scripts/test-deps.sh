#!/usr/bin/env bash
# Installs what the tests need besides the Rust toolchain, from the machine's Debian archive
# (no binary is downloaded from anywhere else): bubblewrap and busybox. The web-server script
# tests (tests/tools/webserver_scripts.rs, tests/tools/injection_payloads.rs) run the injected init
# containers' shell scripts under bwrap, with the scripts' absolute paths bound to temporary
# directories, once with dash and once with BusyBox's sh (the agent image is Alpine-based).
# The image test (tests/tools/image.rs) runs the image's binary under bwrap too. shellcheck checks
# the workflows' `run:` scripts for actionlint (`just workflows`).
# Tested with Debian 12's bubblewrap 0.8.0-2+deb12u1, busybox 1:1.35.0-4+deb12u1 and
# shellcheck 0.9.0-1.
set -euo pipefail
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v busybox >/dev/null || missing+=(busybox)
command -v shellcheck >/dev/null || missing+=(shellcheck)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "installing ${missing[*]} from Debian's archive ..." >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
