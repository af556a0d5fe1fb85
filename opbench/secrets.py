"""Credentials never leave the process: every URL password, every `password=` parameter and every password
opbench has been given is replaced by *** in text that opbench prints or writes.

`mask(text)` is the one function for this. It masks
  - the password of any URL in the text (SQLAlchemy's `make_url(...).render_as_string(hide_password=True)`,
    whatever characters the password holds; a URL SQLAlchemy cannot parse, or one whose password holds an
    unescaped '@', is masked from the first ':' of its user part up to the last '@');
  - `password=`, `passwd=`, `pwd=` and `sslpassword=` parameters (query strings, libpq connection strings);
  - every password of 4 or more characters registered with `register(url)` (the storage URLs opbench
    opens), wherever it appears verbatim or percent-encoded, so a driver's error message that echoes it is
    masked too.
`mask_argv(argv)` masks a command line, token by token, before it is recorded in a results file, a report,
a study or a tuned record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, unquote

MASK = "***"
MIN_LITERAL = 4  # registered passwords at least this long are masked verbatim anywhere in a text

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_PARAM = re.compile(
    r"(?i)(?<![A-Za-z0-9_])((?:ssl)?passw(?:or)?d|pwd)(\s*=\s*)('[^']*'|\"[^\"]*\"|[^&\s;,'\"]*)"
)
_SECRETS: set[str] = set()


def _userinfo_password(url: str) -> str | None:
    """The text between the first ':' of the user part and the last '@' (None without a user:password@)."""
    rest = url.split("://", 1)[1]
    if "@" not in rest:
        return None
    userinfo = rest.rsplit("@", 1)[0]
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


def _rendered_masked(url: str) -> str | None:
    """SQLAlchemy's rendering of the URL with its password hidden; None where it cannot be trusted: not a
    URL it parses, or a password with an unescaped '@' (parsed as a shorter password and a host with '@')."""
    try:
        # SQLAlchemy comes with optuna (opbench[tune]): a URL is masked without it too
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        return None
    if "@" in (parsed.host or "") or "@" in (parsed.database or ""):
        return None
    return str(parsed.render_as_string(hide_password=True))


def mask_url(url: str) -> str:
    """One URL with the password of its user part masked (password parameters: mask())."""
    secret = _userinfo_password(url)
    if not secret:
        return url
    masked = _rendered_masked(url)
    if masked is None or secret in masked.split("://", 1)[1].split("@")[0]:
        scheme, rest = url.split("://", 1)
        userinfo, host = rest.rsplit("@", 1)
        masked = f"{scheme}://{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    return masked


def register(url: str) -> None:
    """Remember a URL's password (and password parameters) so that mask() hides them wherever they appear."""
    found = []
    secret = _userinfo_password(url) if "://" in url else None
    if secret:
        found += [secret, unquote(secret)]  # as written, and as the driver will see it
    for m in _PARAM.finditer(url):
        value = m[3].strip("'\"")
        found += [value, unquote(value)]
    for s in found:
        # Shorter ones are still masked inside URLs and parameters; replacing every occurrence of a 1-3
        # character string would garble every message instead.
        if len(s) >= MIN_LITERAL:
            _SECRETS.update({s, quote(s, safe=""), quote(s)})


def _mask_match(m: re.Match[str]) -> str:
    url = m[0]
    trail = len(url) - len(url.rstrip(".,;:)]}!?"))  # sentence punctuation after a URL is not part of it
    return mask_url(url[: len(url) - trail]) + url[len(url) - trail :] if trail else mask_url(url)


def mask(text: object) -> str:
    """`text` (str() of it) with every credential masked."""
    out = _URL.sub(_mask_match, str(text))
    out = _PARAM.sub(lambda m: f"{m[1]}{m[2]}{MASK}", out)  # query strings and connection strings alike
    for secret in sorted(_SECRETS, key=len, reverse=True):
        out = out.replace(secret, MASK)
    return out


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line with every credential masked, token by token."""
    return [mask(a) for a in argv]
