"""Database URLs made safe to print: the password never reaches a log line, an error
message or a banner (`kubectl logs` is readable by more people than the Secret).

Pure: no I/O.  ``redact(url)`` for a URL we print on purpose; ``redact_text(text, url)``
for text we did not write (an exception's message), which may quote the URL or the
password itself.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"

# scheme://user:password@  — the password runs to the *last* "@" before the host, since
# an unescaped "@" in a password is common and libpq splits at the last one too.
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*):(?P<pw>[^\s/?#]*)@")
# key=value passwords: libpq's "password=..." in a query string or a keyword DSN.
_PASSWORD_PARAM = re.compile(r"(?P<key>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s&;]+)",
                             re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` parameter)
    replaced by ``***``; the user, host, port, database and options are kept, so the
    message still says where it went.  Anything without a password comes back as is."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['head']}:{MASK}@", url)
    return _PASSWORD_PARAM.sub(lambda m: f"{m['key']}{MASK}", text)


def passwords_in(url: str) -> list[str]:
    """The password(s) a database URL carries, raw and URL-decoded (either may be
    quoted by a library's error message)."""
    found: list[str] = []
    match = _URL_CREDENTIALS.search(url)
    if match and match["pw"]:
        found += [match["pw"], unquote(match["pw"])]
    try:
        query = urlsplit(url).query
    except ValueError:
        query = ""
    found += [v for k, v in parse_qsl(query) if k.lower() == "password" and v]
    return sorted({p for p in found if p}, key=len, reverse=True)


def redact_text(text: str, *urls: str) -> str:
    """``text`` with every URL's credentials masked and, for each of ``urls``, every
    verbatim occurrence of its password too (an error may quote it out of context)."""
    text = redact(text)
    for url in urls:
        for password in passwords_in(url or ""):
            text = text.replace(password, MASK)
    return text
