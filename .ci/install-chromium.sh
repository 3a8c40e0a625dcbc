#!/usr/bin/env bash
# Install headless Chromium (Debian package `chromium`) for the report's browser test
# (tests/test_report_chromium.py, marker `chromium`). CI requires that suite: when Chromium cannot
# be installed this script says why and exits 1.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    echo "install-chromium: already installed: $(chromium --version 2>/dev/null || chromium-browser --version 2>/dev/null)"
    exit 0
fi
fail() { echo "install-chromium: FAILED: $*" >&2; exit 1; }
command -v apt-get >/dev/null 2>&1 || fail "no apt-get here to install the Debian package chromium"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null \
        || fail "not root and no password-less sudo to install the Debian package chromium"
    SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || fail "apt-get update"
$SUDO apt-get install -y -qq chromium >/dev/null || fail "apt-get install chromium"
echo "install-chromium: installed: $(chromium --version 2>/dev/null)"
