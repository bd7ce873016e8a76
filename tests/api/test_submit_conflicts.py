"""Requests that contradict themselves, or name a team that does not exist, are refused (issue 10,
observation 12): ``gpufleet submit --gpus 1 --mig 1g.10gb`` silently became a MIG job, and
``--team nosuchteam`` as admin created the team. The server refuses both with a 422 naming the
fields at fault (so SDK users get it too), and the CLI shows that message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.main import app
from gpufleet.sdk import Client
from gpufleet.store.models import Team
from tests.support.api_support import Api, fields, make_api, problem

runner = CliRunner()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


# A GPU request is one shape: whole GPUs (gpus), a fraction of one shared GPU (gpu_milli) or one MIG
# slice (mig). Two shapes in one request are refused, naming both fields.
CONFLICTS = [
    ("one GPU and a MIG slice", {"gpus": 1, "mig": "1g.10gb"}, {"body.gpus", "body.mig"}),
    ("four GPUs and a MIG slice", {"gpus": 4, "mig": "1g.10gb"}, {"body.gpus", "body.mig"}),
    ("one GPU and a fraction", {"gpus": 1, "gpu_milli": 500}, {"body.gpus", "body.gpu_milli"}),
    ("a fraction and a MIG slice", {"gpu_milli": 500, "mig": "1g.10gb"}, {"body.gpu_milli", "body.mig"}),
]


@pytest.mark.parametrize(("body", "named"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS])
def test_two_gpu_shapes_in_one_request_are_refused_naming_both(api: Api, body: dict[str, Any], named: set[str]) -> None:
    r = api.client.post("/v1/jobs", json={"command": ["true"], **body}, headers=api.h("alice"))
    doc = problem(r, 422, "invalid_input")
    assert named <= set(fields(doc)), doc
    for field in named:
        assert field.removeprefix("body.") in doc["detail"]
    assert api.client.get("/v1/jobs", headers=api.h("alice")).json()["items"] == []  # nothing queued


ONE_SHAPE = [
    ("whole GPUs", {"gpus": 2}, {"gpus": 2, "gpu_milli": None, "mig": None}),
    ("a fraction", {"gpu_milli": 500}, {"gpus": 1, "gpu_milli": 500, "mig": None}),
    ("a MIG slice", {"mig": "1g.10gb"}, {"gpus": 1, "gpu_milli": None, "mig": "1g.10gb"}),
    ("no GPU", {}, {"gpus": 0, "gpu_milli": None, "mig": None}),
]


@pytest.mark.parametrize(("body", "shape"), [c[1:] for c in ONE_SHAPE], ids=[c[0] for c in ONE_SHAPE])
def test_one_gpu_shape_is_accepted(api: Api, body: dict[str, Any], shape: dict[str, Any]) -> None:
    job = api.submit("alice", **body)
    assert {k: job[k] for k in shape} == shape


def test_the_sdk_refuses_the_conflict(api: Api) -> None:
    from gpufleet.errors import InputError

    with Client("http://testserver", api.secrets["alice"], transport=api.sdk_transport) as c:
        with pytest.raises(InputError) as err:
            c.submit(command=["true"], gpus=1, mig="1g.10gb")
        assert "gpus" in str(err.value) and "mig" in str(err.value)
        assert c.list() == []


def test_an_unknown_team_is_refused_not_created(api: Api) -> None:
    r = api.client.post("/v1/jobs", json={"command": ["true"], "team": "nosuchteam"}, headers=api.h("admin"))
    doc = problem(r, 422, "invalid_input")
    assert fields(doc) == ["body.team"]
    assert "nosuchteam" in doc["detail"]
    assert "gpufleet team set nosuchteam" in doc["detail"] and "PUT /v1/teams/nosuchteam" in doc["detail"]
    with api.db.session() as s:
        assert s.get(Team, "nosuchteam") is None
    assert api.client.get("/v1/teams/nosuchteam", headers=api.h("admin")).status_code == 404


def test_a_team_created_on_purpose_takes_jobs(api: Api) -> None:
    r = api.client.put("/v1/teams/newteam", json={"weight": 1.0}, headers=api.h("admin"))
    assert r.status_code == 200, r.text
    assert api.submit("admin", team="newteam")["team"] == "newteam"


# -- the CLI ----------------------------------------------------------------------------------------


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    def factory(url: str | None, token: str | None) -> Client:
        return Client("http://testserver", token or api.secrets["admin"], transport=api.sdk_transport)

    monkeypatch.setattr(cli_jobs, "make_client", factory)
    return api


CLI_REFUSALS = [
    ("gpus and mig", ["--gpus", "1", "--mig", "1g.10gb"], ["--gpus", "--mig"]),
    ("gpus and fraction", ["--gpus", "1", "--gpu-milli", "500"], ["--gpus", "--gpu-milli"]),
    ("unknown team", ["--team", "nosuchteam"], ["body.team", "nosuchteam", "gpufleet team set nosuchteam"]),
]


@pytest.mark.parametrize(("args", "said"), [c[1:] for c in CLI_REFUSALS], ids=[c[0] for c in CLI_REFUSALS])
def test_the_cli_shows_the_refusal(cli: Api, args: list[str], said: list[str]) -> None:
    res = runner.invoke(app, ["submit", *args, "--", "true"], env={"COLUMNS": "400"})
    assert res.exit_code == 2, res.output
    err = " ".join(res.stderr.split())
    for text in said:
        assert text in err, err
    assert cli.client.get("/v1/jobs", headers=cli.h("admin")).json()["items"] == []
