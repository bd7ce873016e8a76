"""Where the MLflow sync may send the server's credentials: tracking URIs parsed and compared.

The server talks to MLflow with *its own* credentials, so a job's ``MLFLOW_TRACKING_URI`` is used
only when it is ``mlflow.tracking_uri`` itself or lies under an entry of ``mlflow.job_tracking_uris``
(:func:`allowed_uri` parses an entry; :mod:`gpufleet.server.settings` refuses a bad one at start).
URIs are compared parsed, never as strings (:func:`uri_allowed`): same scheme, host and port (the
scheme's default when absent), the entry's path a prefix in whole segments; a URI with a user name
or password, a query, a fragment, a ``.``/``..`` segment, a backslash or a space is never allowed.
:func:`redact_uri` is what a log line or a job event may show of a URI.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit


def redact_uri(uri: str) -> str:
    """``uri`` without a password, token or query: fit for a log line or a job event."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparsable URI>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_file_store(uri: str) -> bool:
    """``uri`` names an MLflow file store (a path, not a server)."""
    return uri.startswith(("file:", "/", "."))


_DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")


@dataclass(frozen=True, slots=True)
class UriKey:
    """What decides where requests to a tracking URI go: scheme, host, port (the scheme's default
    when absent) and path (percent-decoded segments)."""

    scheme: str
    host: str
    port: int | None
    path: tuple[str, ...]

    def covers(self, other: UriKey) -> bool:
        """``other`` is this server, at this path or under it (whole segments)."""
        same = (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)
        return same and other.path[: len(self.path)] == self.path


def uri_key(uri: str) -> UriKey:
    """``uri`` parsed, or ValueError saying why it cannot be compared safely: a user name or
    password, a query or fragment (which hide another host from a string comparison, or from this
    one in another parser), a ``.``/``..`` segment, a backslash, a space, a bad port, no scheme."""
    if not uri:
        raise ValueError("is empty")
    if any(c <= " " or c in "\\\x7f" or not c.isascii() for c in uri):
        raise ValueError("holds a space, a control or non-ASCII character, or a backslash")
    if "?" in uri or "#" in uri:
        raise ValueError("has a query or a fragment")
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not _SCHEME.fullmatch(scheme):
        raise ValueError("names no scheme (https://host, file:///path, ...)")
    if "@" in parts.netloc:
        raise ValueError("carries a user name or password")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"has a bad port ({e})") from None
    host = (parts.hostname or "").rstrip(".")
    if scheme in _DEFAULT_PORTS and not host:
        raise ValueError("names no host")
    if scheme == "file" and host == "localhost":
        host = ""
    segments = tuple(seg for seg in unquote(parts.path).split("/") if seg)
    if any(seg in (".", "..") for seg in segments):
        raise ValueError("has a '.' or '..' path segment")
    return UriKey(scheme, host, _DEFAULT_PORTS.get(scheme) if port is None else port, segments)


def allowed_uri(entry: str) -> UriKey:
    """An entry of ``mlflow.job_tracking_uris``, parsed; ValueError naming the setting if it is not
    one a job's URI can be compared with (an http(s) entry names its host: ``https://`` alone would
    send the server's credentials to any host)."""
    try:
        return uri_key(entry)
    except ValueError as e:
        raise ValueError(f"mlflow.job_tracking_uris: {redact_uri(entry)!r} {e}") from None


def uri_allowed(uri: str, allowed: Iterable[UriKey]) -> bool:
    """``uri`` is one of the ``allowed`` servers, at or under its path: compared parsed (scheme,
    host, port, path segments), never as a string prefix, and never if ``uri`` cannot be parsed safely."""
    try:
        key = uri_key(uri)
    except ValueError:
        return False
    return any(a.covers(key) for a in allowed)


def uri_key_or_none(uri: str) -> UriKey | None:
    """:func:`uri_key`, or None for a URI that cannot be compared safely."""
    try:
        return uri_key(uri)
    except ValueError:
        return None
