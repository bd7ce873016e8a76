"""MLflow sync security (issue 20, findings 2 and 3), against the real world of test_mlflow_sync:
the controller with the local backend, the API's submit path and MLflow's own client.

- The server's MLflow credentials (``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME``/
  ``PASSWORD``) go only to ``mlflow.tracking_uri`` and to URIs an admin listed in
  ``mlflow.job_tracking_uris`` (empty by default), compared by scheme, host, port and path: a job
  naming a loopback listener of its own as its tracking server gets nothing sent there.
- A run is written only for the team that owns it: the run's experiment carries the tag
  ``gpufleet.team`` with the job's team. A job of one team that names another team's run leaves
  that run untouched and gets an ``mlflow_skipped`` event saying why.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.integrations import mlflow_uris
from gpufleet.integrations.mlflow_sync import LOGGED, METRIC_COST, RUN_LABEL, SKIPPED
from gpufleet.server.settings import MlflowSettings
from gpufleet.store import repo
from gpufleet.store.db import Database
from tests.server.test_mlflow_sync import Fleet, Tracking, make_fleet, make_tracking

TAG_TEAM = "gpufleet.team"  # the experiment tag that names the team a run belongs to
SERVER_TOKEN = "server-secret-token-4711"
SERVER_USER, SERVER_PASSWORD = "gpufleet-server", "server-secret-password-4711"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    with make_fleet(tmp_path, db) as f:
        yield f
    db.dispose()


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tracking:
    return make_tracking(tmp_path / "mlruns", monkeypatch)  # its experiment: team vision's


# -- a tracking server a job controls ---------------------------------------------------------------


class Listener:
    """An HTTP server on a loopback port (what a job can open): records every request's headers
    and answers 404 the way MLflow does for a run it does not have."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                listener.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such run"}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def with_credentials(self) -> list[str]:
        """The requests that carried any Authorization header (what the server's credentials look like)."""
        return [f"{m} {p}: {h['authorization']}" for m, p, h in self.requests if "authorization" in h]


@contextlib.contextmanager
def listener() -> Iterator[Listener]:
    srv = Listener()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.server.shutdown()
        srv.server.server_close()


@pytest.fixture(params=["token", "basic"])
def server_credentials(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's own MLflow credentials in its environment (what MLflow's client sends); the
    Authorization value they produce must never reach a URI a job named."""
    for name in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "token":
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SERVER_TOKEN)
        return SERVER_TOKEN
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", SERVER_USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SERVER_PASSWORD)
    return "Basic "


def test_a_job_cannot_make_the_server_send_its_credentials_to_a_uri_it_names(
    fleet: Fleet, tracking: Tracking, server_credentials: str
) -> None:
    """Finding 2: a job names a loopback listener it controls as MLFLOW_TRACKING_URI. With the
    defaults (no job URI allowed) and with allow-lists that only look like it by string prefix, the
    listener gets no request at all; the job's run is not synced and its event names the setting.
    Only a URI an admin listed exactly (scheme, host, port) is contacted."""
    with listener() as spy:
        job = fleet.run(labels={RUN_LABEL: tracking.run(accuracy=[0.1, 0.2])}, env={"MLFLOW_TRACKING_URI": spy.uri})
        sync = fleet.sync(tracking_uri=tracking.uri)  # the defaults: the server's own tracking server only
        stats = sync.sync_once()
        time.sleep(0.5)  # anything sent has arrived by now
        assert spy.with_credentials() == [] and spy.requests == []
        assert stats.skipped == [job] and stats.logged == [] and stats.failed == []
        (event,) = fleet.mlflow_events(job)
        assert event["reason"].startswith(f"{SKIPPED}: ") and "mlflow.job_tracking_uris" in event["reason"]
        assert spy.uri in event["reason"]

        # allow-lists a raw string prefix would let through: another host in the userinfo, another
        # port than the one listed (http's default 80), a host that only starts like the listed one
        lookalikes = {
            f"http://mlflow.corp@127.0.0.1:{spy.port}": ["http://mlflow.corp"],
            spy.uri: ["http://127.0.0.1"],
            f"http://127.0.0.1:{spy.port}0": [spy.uri],  # the listed port with a digit more
            f"{spy.uri}/mlflow/../x": [f"{spy.uri}/mlflow"],  # out of the listed path
        }
        jobs = {}
        for uri, allowed in lookalikes.items():
            jobs[uri] = fleet.run(labels={RUN_LABEL: tracking.run()}, env={"MLFLOW_TRACKING_URI": uri})
            stats = fleet.sync(tracking_uri="http://127.0.0.1", job_tracking_uris=allowed).sync_once()
            assert stats.skipped == [jobs[uri]], (uri, allowed, stats)
        time.sleep(0.5)
        assert spy.with_credentials() == [] and spy.requests == []
        for uri, job_id in jobs.items():
            (event,) = fleet.mlflow_events(job_id)
            assert "is not allowed" in event["reason"] and "mlflow.job_tracking_uris" in event["reason"], uri

        # the control: an admin lists the listener itself; then (and only then) it is contacted
        listed = fleet.run(labels={RUN_LABEL: tracking.run()}, env={"MLFLOW_TRACKING_URI": spy.uri})
        stats = fleet.sync(tracking_uri=tracking.uri, job_tracking_uris=[f"{spy.uri}/"]).sync_once()
        assert stats.failed == [listed]  # it answered 404: retried later, like any run it does not have
        sent = spy.with_credentials()
        assert sent and all(server_credentials in line for line in sent), sent


def test_a_job_may_name_the_servers_own_tracking_uri(fleet: Fleet, tracking: Tracking) -> None:
    """With the defaults, a job whose MLFLOW_TRACKING_URI is mlflow.tracking_uri itself (the same
    scheme, host, port and path) is logged there; one under it is not."""
    run_id = tracking.run(accuracy=[0.1, 0.2])
    same = fleet.run(labels={RUN_LABEL: run_id}, env={"MLFLOW_TRACKING_URI": tracking.uri + "/"})
    under = fleet.run(labels={RUN_LABEL: tracking.run()}, env={"MLFLOW_TRACKING_URI": tracking.uri + "/sub"})
    stats = fleet.sync(tracking_uri=tracking.uri).sync_once()
    assert stats.logged == [same] and stats.skipped == [under]
    assert METRIC_COST in tracking.metrics(run_id)


def test_the_allow_list_compares_scheme_host_port_and_path() -> None:
    entries = ("https://mlflow.corp", "http://mlflow.corp:5000/team-a/", "file:///srv/runs")
    allowed = [mlflow_uris.allowed_uri(u) for u in entries]
    ok = [
        "https://mlflow.corp", "https://MLflow.Corp/", "https://mlflow.corp:443/x", "https://mlflow.corp./",
        "http://mlflow.corp:5000/team-a", "http://mlflow.corp:5000/team-a/sub",
        "file:///srv/runs", "file:///srv/runs/x", "file://localhost/srv/runs",
    ]  # fmt: skip
    refused = [
        "https://mlflow.corp.evil.com", "https://mlflow.corp@evil.com", "https://evil.com#@mlflow.corp",
        "https://evil.com?@mlflow.corp", "https://u:p@mlflow.corp", "http://mlflow.corp", "https://mlflow.corp:8443",
        "http://mlflow.corp:5000/team-ab", "http://mlflow.corp:5000/team-a/../team-b",
        "http://mlflow.corp:5000/team-a/%2e%2e/team-b", "http://mlflow.corp:5000/", "https://mlflow.corp\\@evil.com",
        "https://mlflow.corp /", "file:///srv/runs-other", "file:///srv/runs/../etc", "/srv/runs", "sqlite:///srv/runs",
        "https://mlflow.corp:notaport", "", "mlflow.corp",
    ]  # fmt: skip
    for uri in ok:
        assert mlflow_uris.uri_allowed(uri, allowed), uri
    for uri in refused:
        assert not mlflow_uris.uri_allowed(uri, allowed), uri
    assert not mlflow_uris.uri_allowed("https://mlflow.corp", [])  # the default: no job URI at all


def test_the_settings_refuse_an_allow_list_entry_that_names_no_host() -> None:
    """An http(s) entry must name a host: "https://" would hand the server's credentials to any host."""
    assert MlflowSettings().job_tracking_uris == []
    assert MlflowSettings(job_tracking_uris=[" https://mlflow.corp/ "]).job_tracking_uris == ["https://mlflow.corp/"]
    for bad in ("http://", "https://", "https://u:p@mlflow.corp", "https://mlflow.corp?x=1", "mlflow.corp", ""):
        with pytest.raises(ValueError, match="job_tracking_uris"):
            MlflowSettings(job_tracking_uris=[bad])


# -- run ownership ----------------------------------------------------------------------------------


def team_client(fleet: Fleet, team: str) -> str:
    """A token of another team (its own admin: it may submit)."""
    with fleet.db.session() as s:
        repo.ensure_team(s, team, time.time())
        _, secret = repo.create_token(s, team=team, role="admin", name=f"{team}-admin", now=time.time())
    return secret


def run_as(fleet: Fleet, token: str, **body: Any) -> str:
    body.setdefault("command", ["sleep", "0.4"])
    body.setdefault("gpus", 1)
    r = fleet.api.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    fleet.until(lambda: fleet.state(job_id) in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"))
    return job_id


def test_a_team_cannot_make_the_server_write_into_another_teams_run(fleet: Fleet, tracking: Tracking) -> None:
    """Finding 3: team vision's job names team nlp's run (its experiment carries gpufleet.team=nlp).
    The run gets no metric and no tag from it, and the job's event says why; nlp's own job naming
    the run is logged. A run in an experiment without the tag is no team's: refused too."""
    nlp_token = team_client(fleet, "nlp")
    nlp_exp = tracking.client.create_experiment("nlp-sweeps", tags={TAG_TEAM: "nlp"})
    nlp_run: str = tracking.client.create_run(nlp_exp).info.run_id
    for step, value in enumerate([0.5, 0.8]):
        tracking.client.log_metric(nlp_run, "accuracy", value, step=step)

    intruder = fleet.run(labels={RUN_LABEL: nlp_run}, env={"MLFLOW_RUN_ID": nlp_run})  # team vision
    stats = fleet.sync(tracking_uri=tracking.uri).sync_once()
    assert tracking.tags(nlp_run) == {} and set(tracking.metrics(nlp_run)) == {"accuracy"}  # untouched
    assert stats.skipped == [intruder] and stats.logged == []
    (event,) = fleet.mlflow_events(intruder)
    assert event["reason"].startswith(f"{SKIPPED}: run {nlp_run} is not team 'vision''s")
    assert f"{TAG_TEAM}=vision" in event["reason"] and "nlp" not in event["reason"].replace(nlp_run, "")
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().skipped == []  # refused once, not retried

    owner = run_as(fleet, nlp_token, labels={RUN_LABEL: nlp_run})
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == [owner]
    assert METRIC_COST in tracking.metrics(nlp_run)
    assert tracking.tags(nlp_run)["gpufleet.team"] == "nlp" and tracking.tags(nlp_run)["gpufleet.job_id"] == owner
    (event,) = fleet.mlflow_events(owner)
    assert event["reason"].startswith(LOGGED)

    # the run's own gpufleet.team tag (the server wrote nlp; anyone with write access could write
    # vision) grants nothing: the experiment's tag decides
    tracking.client.set_tag(nlp_run, TAG_TEAM, "vision")
    again = fleet.run(labels={RUN_LABEL: nlp_run})
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().skipped == [again]
    assert len(tracking.history(nlp_run, METRIC_COST)) == 1

    # an experiment no team marked: no one's run
    untagged = tracking.client.create_experiment("untagged")
    stray_run: str = tracking.client.create_run(untagged).info.run_id
    stray = fleet.run(labels={RUN_LABEL: stray_run})
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().skipped == [stray]
    assert tracking.metrics(stray_run) == {} and tracking.tags(stray_run) == {}
