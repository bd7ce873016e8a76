"""``python -m gpufleet.dashboards``: rewrite the shipped JSON (``--check``: compare, ``--docs``: panel tables)."""

from gpufleet.dashboards.shipped import main

raise SystemExit(main())
