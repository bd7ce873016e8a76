"""The token examples in the docs are tokens the server issues (issue 23, item 11: docs/agent.md
showed ``gf_...`` where the server issues ``gpf_``)."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.store import repo
from gpufleet.store.db import Database
from tests.support.paths import REPO

EXAMPLE = re.compile(r"(?:Bearer |GPUFLEET_TOKEN[=:]\s*\"?)([A-Za-z]+_)\.\.\.")


def test_token_examples_use_the_prefix_the_server_issues(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/t.db")
    try:
        db.upgrade()
        with db.session() as s:
            _row, secret = repo.create_token(s, name="doc", role="member", team="ml", now=0.0)
    finally:
        db.dispose()
    issued = secret.split("_", 1)[0] + "_"
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    seen = {(p.name, m.group(1)) for p in docs for m in EXAMPLE.finditer(p.read_text(encoding="utf-8"))}
    assert seen, "no token example found: the pattern no longer matches the docs"
    assert {name for name, prefix in seen if prefix != issued} == set(), (issued, sorted(seen))
