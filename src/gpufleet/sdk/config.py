"""Where the server lives and which token to use — one convention shared by the server and its clients.

The server (``gpufleet up``) and every client (SDK, CLI) find each other through the same home
directory, so that on a single machine nothing has to be configured:

- ``GPUFLEET_HOME`` (default: ``platformdirs.user_data_dir("gpufleet")``) holds ``gpufleet.db``,
  ``logs/``, ``runs/``, ``admin.token`` (mode 0600: the admin token written on the first start in
  single-user mode) and ``server.json`` (``{"url": ...}``, written by ``gpufleet up``).
- URL: explicit argument > ``$GPUFLEET_URL`` > ``<home>/server.json`` > :data:`DEFAULT_URL`.
- Token: explicit argument > ``$GPUFLEET_TOKEN`` > ``<home>/admin.token``.

The admin token is a password: it is written atomically with mode 0600 (never world-readable, not
even for an instant), and a token file that others can read is used but warned about
(:class:`InsecureTokenFileWarning`), because refusing it would lock the owner out of their own server.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

import platformdirs

from gpufleet.errors import ConfigError

DEFAULT_PORT = 8470
DEFAULT_HOST = "127.0.0.1"
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"

ENV_HOME = "GPUFLEET_HOME"
ENV_URL = "GPUFLEET_URL"
ENV_TOKEN = "GPUFLEET_TOKEN"

DB_FILE = "gpufleet.db"
ADMIN_TOKEN_FILE = "admin.token"
SERVER_FILE = "server.json"
LOGS_DIR = "logs"
RUNS_DIR = "runs"


class InsecureTokenFileWarning(UserWarning):
    """The token file can be read by users other than its owner."""


def home_dir() -> Path:
    """The server's home: ``$GPUFLEET_HOME`` or the platform's per-user data directory."""
    env = os.environ.get(ENV_HOME)
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("gpufleet"))


def admin_token_path(home: Path | None = None) -> Path:
    return (home or home_dir()) / ADMIN_TOKEN_FILE


def server_file_path(home: Path | None = None) -> Path:
    return (home or home_dir()) / SERVER_FILE


def normalize_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; no trailing slash and no ``/v1`` (the SDK adds it)."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def resolve_url(explicit: str | None = None) -> str:
    """The server URL: ``explicit`` > ``$GPUFLEET_URL`` > ``<home>/server.json`` > the default.

    A ``server.json`` that exists but cannot be understood is an error (naming the file), not a silent
    fall-back to the default: talking to the wrong server is worse than failing.
    """
    if explicit:
        return normalize_url(explicit)
    env = os.environ.get(ENV_URL)
    if env:
        return normalize_url(env)
    path = server_file_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return DEFAULT_URL
    except OSError as e:
        raise ConfigError(f"cannot read it: {e.strerror}", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON: {e.msg}", source=str(path), line=e.lineno) from None
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str) or not url:
        raise ConfigError("expected a non-empty string", source=str(path), field="url")
    return normalize_url(url)


def resolve_token(explicit: str | None = None) -> str | None:
    """The bearer token: ``explicit`` > ``$GPUFLEET_TOKEN`` > ``<home>/admin.token`` > None.

    An ``admin.token`` readable by group or others is still used, with an
    :class:`InsecureTokenFileWarning`; one this user may not read is skipped (someone else's server).
    """
    if explicit:
        return explicit.strip()
    env = os.environ.get(ENV_TOKEN)
    if env:
        return env.strip()
    path = admin_token_path()
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        return None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"{path} is readable by other users (mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}",
            InsecureTokenFileWarning,
            stacklevel=2,
        )
    return text or None


def write_private_file(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable only by its owner (mode 0600).

    The content goes to a temporary file created 0600 in the same directory, is flushed to disk, then
    renamed over ``path``: readers see the old file or the new one, never a torn or world-readable one.
    Missing parent directories are created with mode 0700.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o600)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
