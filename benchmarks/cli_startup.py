"""CLI start-up: the wall time of whole ``gpufleet`` processes, as a person at a shell sees it.

Two commands, each run ``--runs`` times in a fresh process (interpreter start, imports, Typer's
parsing, the command itself, exit):

- ``gpufleet --help``: nothing but the CLI's own start-up and the help text;
- ``gpufleet whoami``: start-up plus one API call, answered by a stub HTTP server on 127.0.0.1 (the
  SDK retries a closed port for seconds, which would measure its backoff, not the start-up).

Also reports which heavy modules a bare ``import gpufleet.cli.main`` loads, for the gpufleet this
Python imports (none should be; ``tests/cli/test_cli_ux.py`` checks it too).
Prints JSON lines per command: the wall time's median, p90 and minimum and the median CPU time
(user + system), in ms.

    .venv/bin/python benchmarks/cli_startup.py [--runs 20] [--gpufleet .venv/bin/gpufleet]

Target: < 300 ms median for both on the 2-core development box. ``--help`` meets it; ``whoami`` does
not: importing the SDK (httpx, pydantic, the wire models) alone takes about 250 ms there.

``--gpufleet`` times another build, e.g. a wrapper script that runs an older checkout, so that
before and after are measured in the same minutes on a shared, noisy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TARGET_MS = 300.0
HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "numpy", "httpx", "pydantic", "gpufleet.sim", "gpufleet.cost")
WHOAMI = json.dumps({"token_id": "t0", "team": "ops", "role": "admin"}).encode()


class _Stub(BaseHTTPRequestHandler):
    """``GET /v1/whoami`` and nothing else."""

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/v1/whoami":
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(WHOAMI)))
            self.end_headers()
            self.wfile.write(WHOAMI)
        else:
            self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@contextmanager
def stub_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def time_runs(argv: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system) of ``runs`` fresh processes, after one warm-up
    run that fills the OS caches. CPU time is what the process itself costs; wall time also counts
    waiting for a CPU, which on a busy shared box is most of the noise."""
    wall, cpu = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(
                f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}"
            )
        if i:
            wall.append(elapsed)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def heavy_modules(python: str, env: dict[str, str]) -> list[str]:
    code = (
        "import sys, gpufleet.cli.main; "
        f"print(' '.join(sorted({{m.split('.')[0] if not m.startswith('gpufleet') else '.'.join(m.split('.')[:2]) "
        f"for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {HEAVY!r})}})))"
    )
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return out.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    default_cli = shutil.which("gpufleet", path=str(Path(sys.executable).parent)) or "gpufleet"
    parser.add_argument("--gpufleet", default=default_cli, help="the gpufleet executable to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home, stub_server() as url:
        env = {
            **os.environ,
            "GPUFLEET_HOME": home,  # no real server's token or URL
            "GPUFLEET_URL": url,
            "GPUFLEET_TOKEN": "tok",
            "COLUMNS": "80",
        }
        for name, argv in (("help", [args.gpufleet, "--help"]), ("whoami", [args.gpufleet, "whoami"])):
            wall, cpu = time_runs(argv, env, max(1, args.runs))
            ms = [t * 1000 for t in wall]
            print(
                json.dumps(
                    {
                        "benchmark": "cli_startup",
                        "metric": f"{name}_wall_ms",
                        "command": " ".join(["gpufleet", *argv[1:]]),
                        "runs": len(ms),
                        "median": round(statistics.median(ms), 1),
                        "p90": round(percentile(ms, 90), 1),
                        "min": round(min(ms), 1),
                        "cpu_median": round(statistics.median(cpu) * 1000, 1),
                        "unit": "ms",
                        "target_ms": TARGET_MS,
                    }
                ),
                flush=True,
            )
        print(
            json.dumps(
                {
                    "benchmark": "cli_startup",
                    "metric": "heavy_modules_on_import",
                    "value": heavy_modules(sys.executable, env),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
