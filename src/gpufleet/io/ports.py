"""Listening addresses: fail with one clear line before a server starts on a taken port."""

from __future__ import annotations

import socket

from gpufleet.errors import ConfigError


def check_port(host: str, port: int) -> None:
    """Fail with one clear line before anything starts when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}", field="port") from None
