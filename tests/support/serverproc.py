"""A real ``gpufleet up`` in a subprocess, for end-to-end tests and benchmarks.

The server runs in its own session so that a SIGKILL hits only the server: the jobs it launched
live on (in their own sessions) and are adopted by the next start, as on a real machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpufleet.sdk import Client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(
        self,
        home: Path,
        *,
        gpus: str | None = "8xA100-80GB",  # None: discover with NVML
        settings: dict[str, Any] | None = None,
        db: str | None = None,
        port: int | None = None,
        replica: str | None = None,
    ) -> None:
        self.home = home
        self.gpus = gpus
        self.db = db
        self.port = port or free_port()
        self.replica = replica
        self.settings = {
            "poll_interval_s": 0.1,
            "cycle_interval_s": 0.5,
            "grace_s": 5.0,
            "telemetry_interval_s": 5.0,
            "node_price_usd_per_hour": 32.0,
            "log_level": "warning",
            "jobs_as_server": True,  # CI runs as root; the escape suite sets False and real accounts
            "job_root": str(home.parent / f"{home.name}-jobs"),
            **(settings or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["GPUFLEET_HOME"] = str(self.home)
        env["GPUFLEET_URL"] = self.url
        env.pop("GPUFLEET_TOKEN", None)
        return env

    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        cfg = self.home / "settings.yaml"
        cfg.write_text(yaml.safe_dump(self.settings))
        cmd = [
            sys.executable,
            "-m",
            "gpufleet",
            "up",
            "--config",
            str(cfg),
            "--home",
            str(self.home),
            "--port",
            str(self.port),
        ]
        if self.gpus is not None:
            cmd += ["--gpus", self.gpus]
        env = self.env()
        if self.db:  # the environment, never argv: /proc/<pid>/cmdline is readable by every account
            env["GPUFLEET_DB"] = self.db
        if self.replica:
            env["GPUFLEET_REPLICA"] = self.replica
        self.starts += 1
        log = open(self.home / f"server-{self.port}-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        try:
            self.wait_ready(timeout)
        except BaseException:  # never leave a server that did not come up running (with its API workers)
            self.kill()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.server_log()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server not ready after {timeout}s: {self.server_log()[-3000:]}")

    def server_log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.home.glob("server-*.log")))

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, as in a crash. The server's process group goes with it
        (its API worker processes, which would otherwise live on holding the port); jobs run in
        sessions of their own and live on."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.token, timeout=30.0, retries=8)

    def cli(self, *args: str, check: bool = True, token: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env()
        if token is not None:
            env["GPUFLEET_TOKEN"] = token
        out = subprocess.run(
            [sys.executable, "-m", "gpufleet", *args], env=env, capture_output=True, text=True, timeout=120
        )
        if check and out.returncode != 0:
            raise AssertionError(f"gpufleet {' '.join(args)} → {out.returncode}: {out.stderr}")
        return out

    def kill_jobs(self) -> None:
        """Kill every process the server's runs left (shims and jobs), for test clean-up."""
        import psutil

        runs = self.home / "runs"
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                cmd = " ".join(proc.info["cmdline"] or [])
            except (psutil.Error, TypeError):
                continue
            if "gpufleet.backends.shim" in cmd and str(runs) in cmd:
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        with contextlib.suppress(psutil.Error):
                            child.kill()
                    proc.kill()
