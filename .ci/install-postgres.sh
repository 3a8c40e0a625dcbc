#!/usr/bin/env bash
# Install PostgreSQL (Debian package `postgresql`) for the decision-log tests: the tests start a
# server of their own from its binaries (tests/pg_server.py: initdb, pg_ctl; as the package's
# `postgres` user when CI runs as root), so no cluster of the package is used. CI requires the
# postgres suite and the Ray Serve test: when PostgreSQL cannot be installed this script says why
# and exits 1.
set -u
found() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
version() {
    local bin
    bin=$(command -v postgres 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)
    "$bin" --version 2>/dev/null
}
if found; then
    echo "install-postgres: already installed: $(version)"
    exit 0
fi
fail() { echo "install-postgres: FAILED: $*" >&2; exit 1; }
command -v apt-get >/dev/null 2>&1 || fail "no apt-get here to install the Debian package postgresql"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null \
        || fail "not root and no password-less sudo to install the Debian package postgresql"
    SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || fail "apt-get update"
$SUDO apt-get install -y -qq postgresql >/dev/null || fail "apt-get install postgresql"
found || fail "postgresql installed, but no initdb on PATH or in /usr/lib/postgresql/*/bin"
echo "install-postgres: installed: $(version)"
