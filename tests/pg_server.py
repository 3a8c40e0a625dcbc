"""A real PostgreSQL server for the tests (marker ``postgres``): Debian's ``postgresql`` binaries
(``initdb``, ``pg_ctl``; CI installs the package with .ci/install-postgres.sh), a fresh data
folder, a free loopback port and a unix socket in that folder; stopped and removed afterwards.

PostgreSQL refuses to run as root (initdb and postgres both exit). When the tests run as root,
the server runs as an unprivileged account instead, the Debian package's ``postgres`` (or
``nobody`` where there is none): its data folder is made in the system temporary folder (the
pytest folders of root are not readable by other users) and given to that account, and
``initdb``/``pg_ctl`` are started through ``setpriv`` with that account's uid and gid and no
supplementary groups. Clients connect over TCP on 127.0.0.1 as the database superuser
``calimon`` (``initdb -U calimon``), with ``trust`` authentication: the server answers on
loopback only, for the length of a test module.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ports import free_port

USER = "calimon"


def pg_bindir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else the newest
    /usr/lib/postgresql/<version>/bin (where Debian's package puts them); None when absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(re.sub(r"\D", "", p.parent.parent.name) or 0))
    return versions[-1].parent if versions else None


def _runner() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs the server's programs, and the account it runs them as
    (None: the current, unprivileged user)."""
    if os.geteuid() != 0:
        return [], None
    for name in ("postgres", "nobody"):
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
                "--clear-groups", "--"], account
    raise RuntimeError("running as root and no unprivileged account (postgres, nobody) to run "
                       "PostgreSQL as")


@dataclass
class PostgresServer:
    """A running PostgreSQL: its data folder, port and binaries."""

    root: Path
    port: int
    bindir: Path
    prefix: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        """A connection URL for ``database`` as the superuser, over loopback TCP."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_schema(self, name: str) -> str:
        """Create schema ``name`` (dropped first if it exists) in the database ``postgres``;
        returns a URL whose connections put it first on their ``search_path``, so the tables a
        log creates there are a test's own. (A schema per test, not a database: each database
        adds megabytes that every checkpoint of the server writes.)"""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url()}?options=-csearch_path%3D{name}"

    def pg_ctl(self, *args: str, timeout: float = 120) -> None:
        """Run ``pg_ctl -D DATA ARGS`` as the server's account."""
        subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data),
                        *args], check=True, capture_output=True, timeout=timeout)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.root} -c max_connections=60 "
                   "-c shared_buffers=16MB")
        self.pg_ctl("-l", str(self.root / "server.log"), "-o", options, "-w", "-t", "60",
                    "start")

    def restart(self) -> None:
        """Stop (fast: open connections are cut) and start again on the same port."""
        self.pg_ctl("-m", "fast", "-w", "stop")
        self.start()

    def stop(self) -> None:
        """Stop the server (fast shutdown)."""
        try:
            self.pg_ctl("-m", "fast", "-w", "stop", timeout=60)
        except subprocess.CalledProcessError:
            pass  # already stopped

    def server_log(self) -> str:
        """The server's own log (startup and errors), for failure messages."""
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A fresh PostgreSQL server (module docstring), stopped and its files removed on exit.
    Raises RuntimeError when PostgreSQL is not installed."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb on PATH or in "
                           "/usr/lib/postgresql/*/bin): apt-get install postgresql, or "
                           "bash .ci/install-postgres.sh")
    prefix, account = _runner()
    root = Path(tempfile.mkdtemp(prefix="calimon-pg-"))
    server = PostgresServer(root, free_port(), bindir, prefix)
    try:
        if account is not None:
            os.chown(root, account.pw_uid, account.pw_gid)
        subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(server.data), "-U", USER,
                        "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
                        "--no-instructions"], check=True, capture_output=True, timeout=120)
        server.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"starting PostgreSQL failed: {exc.stderr.decode(errors='replace')}"
                           f"\n{server.server_log()}") from None
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
