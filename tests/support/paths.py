"""Where things are, relative to this checkout (never an absolute path)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: src/, tests/, docs/, examples/, deploy/
SRC = REPO / "src" / "gpufleet"  # the package's source (and its packaged data, SRC / "data")
# The workspace's reference data beside the checkout (../shared: real public traces and prices). A
# clean clone elsewhere may not have it: tests that read it skip, naming the path they looked for.
SHARED = REPO.parent / "shared"
