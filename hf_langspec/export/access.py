"""Who may use `hf-langspec serve`, and how much: API keys, an admin token, per-client limits, CORS.

A server on the loopback needs none of this; one that a network can reach does. All of it is off by default and
each part is one option of `serve`:

* `--api-keys FILE` (one key per line, `#` comments): `/translate` needs a key, sent as LibreTranslate's `api_key`
  field (JSON or form) or as `Authorization: Bearer KEY`; a missing or unknown key is 403 with the reason.
  `/health`, `/ready`, `/languages`, `/metrics` and `/docs` stay open (LibreTranslate's `/languages` is too).
* `--admin-token-file FILE`: the admin routes (`POST /admin/reload-languages`) answer only `Authorization: Bearer
  TOKEN`; without the option they are off (403 naming it). A token is read from a file, never the command line
  (which other users of the machine can list).
* `--requests-per-minute N`: per key and per client address (both are counted; behind a reverse proxy the address
  is the one it forwards, `--forwarded-allow-ips`), over a sliding minute; more is 429 with Retry-After.
* `--max-chars N`: characters of text per request; more is 413 naming the limit.
* `--cors-origins A,B`: the web origins whose pages may call the server from a browser; none by default, and JSON
  routes refuse any content type but JSON (and LibreTranslate's form on `/translate`), so a page elsewhere cannot
  post to the server in its user's browser (a `text/plain` form post is 415).

Keys are compared in constant time (`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import os
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from .api import RequestError

MIN_SECRET_LENGTH = 16  # characters: a shorter key is guessed by trying
WINDOW_SECONDS = 60.0


def read_secrets(path: str | os.PathLike, what: str) -> tuple[str, ...]:
    """The keys (or the token) of `path`: one a line, blank lines and `#` comments skipped. A missing or empty file,
    a key shorter than `MIN_SECRET_LENGTH` or with spaces, or a key listed twice is a ValueError naming the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} {path} cannot be read ({error}); give a UTF-8 file with one secret a line") from None
    secrets: list[str] = []
    for number, line in enumerate(lines, 1):
        secret = line.strip()
        if not secret or secret.startswith("#"):
            continue
        if len(secret) < MIN_SECRET_LENGTH or any(c.isspace() for c in secret):
            raise ValueError(
                f"{what} {path}, line {number}: a secret is at least {MIN_SECRET_LENGTH} characters without spaces; "
                "make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if secret in secrets:
            raise ValueError(f"{what} {path}, line {number}: the secret of line {secrets.index(secret) + 1} again")
        secrets.append(secret)
    if not secrets:
        raise ValueError(f"{what} {path} holds no secret; write one a line")
    return tuple(secrets)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address a socket is bound to) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


class SlidingWindow:
    """Requests per client over the last minute: `wait(client)` is 0 for a request that may go, or the seconds until
    it may; `count(client)` counts one that went."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self.seen: dict[object, deque[float]] = {}

    def wait(self, client: object, now: float | None = None) -> float:
        """0 when `client` may send a request now (it is not counted: `count` does), else the seconds to wait."""
        now = time.monotonic() if now is None else now
        times = self.seen.get(client)
        while times and times[0] <= now - WINDOW_SECONDS:
            times.popleft()
        return times[0] + WINDOW_SECONDS - now if times and len(times) >= self.per_minute else 0.0

    def count(self, client: object, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.seen.setdefault(client, deque()).append(now)
        if len(self.seen) > 4096:  # forget the clients with nothing in the window (bounded memory)
            self.seen = {c: t for c, t in self.seen.items() if t and t[-1] > now - WINDOW_SECONDS}


@dataclass
class AccessPolicy:
    """The server's access settings (see the module); the default is a loopback server's: everything open."""

    api_keys: tuple[str, ...] = ()
    admin_token: str | None = None
    requests_per_minute: int | None = None
    max_chars: int | None = None
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "max_chars"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1.")
        self._window = SlidingWindow(self.requests_per_minute) if self.requests_per_minute else None

    def check_key(self, bearer: str | None, field: object) -> str | None:
        """The request's key (`Authorization: Bearer` or LibreTranslate's `api_key`), checked; None without keys."""
        if not self.api_keys:
            return None
        key = bearer if bearer is not None else field
        if not isinstance(key, str) or not key:
            raise RequestError(
                "this server needs an API key: send it as api_key or as the header Authorization: Bearer KEY",
                HTTPStatus.FORBIDDEN,
            )
        if not _known(key, self.api_keys):
            raise RequestError(
                "the API key is not one of this server's; ask its operator for one", HTTPStatus.FORBIDDEN
            )
        return key

    def check_admin(self, bearer: str | None) -> None:
        if self.admin_token is None:
            raise RequestError(
                "the admin routes are off: start the server with --admin-token-file FILE to use them",
                HTTPStatus.FORBIDDEN,
            )
        if bearer is None or not _known(bearer, (self.admin_token,)):
            raise RequestError(
                "the admin token is missing or wrong: send Authorization: Bearer TOKEN", HTTPStatus.FORBIDDEN
            )

    def check_rate(self, key: str | None, address: str | None) -> None:
        """Count the request against its key's and its address's minute; 429 with Retry-After past the limit."""
        if self._window is None:
            return
        clients = [("key", key)] * (key is not None) + [("address", address)]
        for client in clients:  # a request refused by one count is counted by none
            wait = self._window.wait(client)
            if wait > 0:
                who = "this API key" if client[0] == "key" else f"the address {address}"
                raise RequestError(
                    f"{who} sent {self.requests_per_minute} requests in the last minute, the most this server takes; "
                    f"retry in {math.ceil(wait)} s",
                    HTTPStatus.TOO_MANY_REQUESTS,
                    {"Retry-After": str(math.ceil(wait))},
                )
        for client in clients:
            self._window.count(client)

    def check_chars(self, texts: Iterable[str]) -> None:
        if self.max_chars is None:
            return
        count = sum(len(text) for text in texts)
        if count > self.max_chars:
            raise RequestError(
                f"the request holds {count} characters of text; this server takes at most {self.max_chars} per "
                "request: split the texts over several",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _known(secret: str, secrets: Iterable[str]) -> bool:
    given = secret.encode()
    matches = [hmac.compare_digest(given, known.encode()) for known in secrets]  # every one compared: no early exit
    return any(matches)


__all__ = ["AccessPolicy", "SlidingWindow", "bearer_token", "is_loopback", "read_secrets"]
