"""Server URLs as the bench takes them: checked, credentials moved into an Authorization header, redacted."""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from dspark.core.errors import InputError

# scheme://USERINFO@ anywhere in a text: what redact_url_credentials hides.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s?#]+@")
REDACTED_USERINFO = "***@"


@dataclass(frozen=True)
class ServerUrl:
    """A checked http(s) URL without credentials, and the Authorization header its credentials make."""

    url: str  # scheme://host[:port][/path], no user:password
    authorization: str | None = None  # "Basic ..." from user:password in the URL


def redact_url_credentials(text: str) -> str:
    """`text` with the user:password of every URL in it replaced (http://***@host:port)."""
    return _USERINFO.sub(lambda m: m.group(1) + REDACTED_USERINFO, text)


def parse_server_url(raw: str, option: str = "--url") -> ServerUrl:
    """Check a server URL (http or https, a host, a port within 1..65535, no control characters) and split off
    its credentials; InputError naming the option, the (redacted) value and the fix."""
    shown = redact_url_credentials(raw)
    fix = f"{option} takes http://HOST:PORT (or https://), e.g. http://127.0.0.1:8000"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise InputError(f"{option} {shown!r}: contains a control character (CR, LF, TAB, ...)", hint=fix)
    if any(c.isspace() for c in raw):
        raise InputError(f"{option} {shown!r}: contains white space", hint=fix)
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{option} {shown!r}: not a valid URL ({exc})", hint=fix) from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{option} {shown!r}: the scheme must be http or https", hint=fix)
    if not parts.hostname:
        raise InputError(f"{option} {shown!r}: names no host", hint=fix)
    if port == 0:
        raise InputError(f"{option} {shown!r}: port 0 is not a server's port", hint=fix)
    if parts.query or parts.fragment:
        raise InputError(f"{option} {shown!r}: a server URL takes no ?query or #fragment", hint=fix)
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    auth = None
    if parts.username is not None or parts.password is not None:
        user = unquote(parts.username or "")
        password = unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        auth = f"Basic {token}"
    return ServerUrl(url=urlunsplit((parts.scheme, netloc, parts.path, "", "")), authorization=auth)


def finite_positive(name: str, value: float) -> None:
    """InputError unless value is a finite number above 0 (nan and inf are not seconds)."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise InputError(f"{name} must be a positive finite number, got {value}")
