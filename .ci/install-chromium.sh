#!/usr/bin/env bash
# Install headless Chromium (Debian package `chromium`) for the report's browser test
# (tests/test_report_chromium.py, marker `chromium`). Never fails the build: without root,
# apt-get or a network it says why and exits 0, and the browser tests skip.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    echo "install-chromium: already installed: $(chromium --version 2>/dev/null || chromium-browser --version 2>/dev/null)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: no apt-get here; skipping (the chromium tests will skip)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install-chromium: not root and no password-less sudo; skipping (the chromium tests will skip)"
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium; then
    echo "install-chromium: installed: $(chromium --version 2>/dev/null)"
else
    echo "install-chromium: apt-get could not install chromium; skipping (the chromium tests will skip)"
fi
exit 0
