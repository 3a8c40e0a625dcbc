"""API keys with a name per key (`KeyStore`), and the sign-in of reviewers' browsers
(`Authenticator`), for the gate in front of `calimon serve` (`calimon.serve.security.Gate`).

A key file (``calimon serve --keys FILE``) has one key per line, ``NAME KEY``, where NAME is
the reviewer (or client) the key belongs to and KEY the key itself (16 characters or more) or
``sha256:HEX``, its sha256, so the file need not hold the key. ``#`` starts a comment. One
name may hold several keys (a rotation); a key belongs to one name. ``$CALIMON_API_KEY``, when
set, is a key too, named ``service``.

Every route but ``/healthz`` takes ``Authorization: Bearer KEY``, and knows the key's name. A
reviewer's browser signs in once at ``/review/login`` with their key (sent there from the review
page it asked for, with ``next``); the server answers with a
cookie (``HttpOnly``, ``SameSite=Strict``) holding a random token whose sha256 the review store
keeps (it survives a restart), good for the review pages and the review API only
(``/review``, ``/v1/review``), and, for a request that changes something, only from the
server's own pages (`browser_write_refusal`: a JSON body, and ``Origin``, ``Sec-Fetch-Site``
and ``Referer``, each when sent, saying the server's own origin).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from calimon.errors import InputError

NAME = re.compile(r"^[A-Za-z0-9._@+-]{1,64}$")
HASHED = re.compile(r"^sha256:[0-9a-f]{64}$")
MIN_KEY_CHARS = 16
SERVICE_NAME = "service"
COOKIE = "calimon_review"
REVIEW_PATHS = ("/review", "/v1/review")
OPEN_PATHS = ("/healthz", "/review/login", "/review/static/")


def sha256_hex(text: str) -> str:
    """The sha256 of ``text`` (UTF-8) in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class KeyStore:
    """Keys and their names: ``entries`` holds ``(name, sha256 of the key)``."""

    entries: tuple[tuple[str, str], ...]

    @classmethod
    def load(cls, path: str | Path | None, env_key: str | None = None) -> KeyStore:
        """The keys of a key file (module docstring; None: no file) plus ``env_key`` named
        ``service``. Errors name the file, the line and the field."""
        entries: list[tuple[str, str]] = []
        if path is not None:
            entries += _read(Path(path))
        if env_key:
            entries.append((SERVICE_NAME, sha256_hex(env_key)))
        seen: dict[str, str] = {}
        for name, digest in entries:
            if seen.get(digest, name) != name:
                raise InputError(f"one key is given to both {seen[digest]!r} and {name!r}",
                                 path=str(path), field="key")
            seen[digest] = name
        return cls(tuple(entries))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def name_of(self, key: str) -> str | None:
        """The name ``key`` belongs to; None for an unknown key (every entry is compared, in
        constant time)."""
        digest = sha256_hex(key).encode()
        found = None
        for name, want in self.entries:
            if hmac.compare_digest(digest, want.encode()) and found is None:
                found = name
        return found

    def names(self) -> list[str]:
        """Every name, once, in file order."""
        return list(dict.fromkeys(n for n, _ in self.entries))


def _read(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise InputError("no such file", path=str(path), field="keys")
    out = []
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = text.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split()
        if len(parts) != 2:
            raise InputError("expected 'NAME KEY' (or 'NAME sha256:HEX')", path=str(path),
                             line=line)
        name, key = parts
        if not NAME.match(name):
            raise InputError(f"expected a name of letters, digits and ._@+- (at most 64), got "
                             f"{name!r}", path=str(path), line=line, field="name")
        if HASHED.match(key):
            out.append((name, key.removeprefix("sha256:")))
        elif len(key) < MIN_KEY_CHARS:
            raise InputError(f"a key needs at least {MIN_KEY_CHARS} characters (or give "
                             "sha256:HEX)", path=str(path), line=line, field="key")
        else:
            out.append((name, sha256_hex(key)))
    return out


@dataclass(frozen=True)
class Refusal:
    """An answer the gate gives instead of the route: a JSON error, or a redirect to the
    sign-in page (``location``)."""

    status: int
    code: str
    message: str
    field: str | None = None
    location: str | None = None


def sign_in_location(scope) -> str:
    """The sign-in page, told to go on to the page asked for (``next``; checked again when
    the sign-in is posted: `calimon.review.api.local_next`)."""
    path = scope.get("path", "")
    query = scope.get("query_string", b"").decode("latin-1")
    asked = path + (f"?{query}" if query else "")
    if asked == "/review":
        return "/review/login"
    return "/review/login?next=" + quote(asked, safe="/")


def _cookie(headers: dict[bytes, bytes]) -> str | None:
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def _bearer(headers: dict[bytes, bytes]) -> str | None:
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _host_of(url: str) -> str:
    """The ``host[:port]`` of an origin or URL (``http://h:8000/x`` -> ``h:8000``)."""
    return url.split("://", 1)[-1].split("/", 1)[0]


def browser_write_refusal(headers: dict[bytes, bytes]) -> Refusal | None:
    """Why a write that a signed-in browser's cookie carries is not one of the server's own
    pages (None: it is). Its body must be declared JSON (an HTML form of another site can post
    ``text/plain`` without asking), and each of ``Origin``, ``Sec-Fetch-Site`` and ``Referer``
    that is sent must say this server's own origin; the refusal names the header. A request
    with none of the three is not a browser's (a browser sends ``Origin`` with every
    ``fetch`` POST and ``Sec-Fetch-Site`` with every request), so it holds the cookie only if
    its sender holds the reviewer's sign-in."""
    if not headers.get(b"content-type", b"").startswith(b"application/json"):
        return Refusal(403, "forbidden", "a signed-in browser writes through the review pages "
                       "only: a JSON body ('Content-Type: application/json')", "content-type")
    host = headers.get(b"host", b"").decode("latin-1")
    origin = headers.get(b"origin")
    if origin is not None and _host_of(origin.decode("latin-1").rstrip("/")) != host:
        return Refusal(403, "forbidden", "a signed-in browser writes through the review pages "
                       "only: this request comes from another origin", "origin")
    site = headers.get(b"sec-fetch-site")
    if site is not None and site.decode("latin-1").strip().lower() != "same-origin":
        return Refusal(403, "forbidden", "a signed-in browser writes through the review pages "
                       f"only: this request comes from a page of another origin "
                       f"(Sec-Fetch-Site: {site.decode('latin-1')[:40]})", "sec-fetch-site")
    referer = headers.get(b"referer")
    if referer is not None and _host_of(referer.decode("latin-1")) != host:
        return Refusal(403, "forbidden", "a signed-in browser writes through the review pages "
                       "only: this request comes from a page of another origin", "referer")
    return None


class Authenticator:
    """Who is calling (module docstring): `check` sets ``scope["calimon.user"]`` or returns
    the `Refusal` to send. ``sessions``: the review store holding sign-ins (None: no review,
    so no cookies)."""

    def __init__(self, keys: KeyStore, sessions=None, session_hours: float = 12.0):
        self.keys, self.sessions, self.ttl = keys, sessions, session_hours * 3600

    async def check(self, scope, headers: dict[bytes, bytes]) -> Refusal | None:
        """Admit the request or say why not."""
        path = scope.get("path", "")
        token = _bearer(headers)
        user = self.keys.name_of(token) if token else None
        review = self.sessions is not None and path.startswith(REVIEW_PATHS)
        if user is None and review and (cookie := _cookie(headers)):
            user = await asyncio.to_thread(self.sessions.session, sha256_hex(cookie),
                                           time.time())
            writes = scope.get("method") not in ("GET", "HEAD")
            if user is not None and writes and path.startswith("/v1/review") and (
                    refusal := browser_write_refusal(headers)) is not None:
                return refusal
        if user is not None:
            scope["calimon.user"] = user
            return None
        if path in ("/healthz",) or (self.sessions is not None and path.startswith(
                OPEN_PATHS[1:])):
            return None
        if review and scope.get("method") == "GET" and not path.startswith("/v1/"):
            return Refusal(303, "sign_in", "sign in first", location=sign_in_location(scope))
        return Refusal(401, "unauthorized", "missing or wrong API key: send 'Authorization: "
                       "Bearer KEY'", "authorization")

    async def sign_in(self, key: str) -> tuple[str, str] | None:
        """``(reviewer, cookie token)`` for a valid key (the sign-in is stored); None
        otherwise."""
        name = self.keys.name_of(key)
        if name is None or self.sessions is None:
            return None
        token, now = secrets.token_urlsafe(32), time.time()
        await asyncio.to_thread(self.sessions.open_session, sha256_hex(token), name, now,
                                now + self.ttl)
        return name, token

    async def sign_out(self, headers: dict[bytes, bytes]) -> None:
        """Forget the sign-in of the request's cookie, if any."""
        cookie = _cookie(headers)
        if cookie and self.sessions is not None:
            await asyncio.to_thread(self.sessions.close_session, sha256_hex(cookie))
