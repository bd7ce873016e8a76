"""What the tools share: money, durations and times in words, rounding, a job's GPU share, the job a
recommendation is about, and the team a question is scoped to."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from gpufleet.agent.outputs import Recommendation
from gpufleet.wire import JobOut, RecommendationOut

if TYPE_CHECKING:
    from gpufleet.sdk import Client


# ----------------------------------------------------------------------------------------------- wording


def usd(x: float | Decimal) -> str:
    """``$1,234.56``; sub-cent amounts keep four decimals (``$0.0042``) so they do not read as zero."""
    v = float(x)
    if v != 0 and abs(v) < 0.01:
        return f"-${-v:.4f}" if v < 0 else f"${v:.4f}"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def duration(seconds: float | None) -> str:
    """``42s``, ``5m09s``, ``2h05m``, ``3d04h``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def hours_text(h: float) -> str:
    return f"{h:.3g} h" if h < 10 else f"{h:,.1f} h"


def gpu_hours_text(gh: float) -> str:
    return f"{gh:.3g}" if gh < 100 else f"{gh:,.0f}"


def when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


# ----------------------------------------------------------------------------------------------- numbers


def rounded(x: float, digits: int = 6) -> float:
    """Money and hours rounded off float noise (0.48000000000000004 → 0.48)."""
    return round(x, digits)


def significant(x: float, digits: int = 6) -> float:
    """Hours to ``digits`` significant digits (a run of seconds is a small number of hours)."""
    return float(f"{x:.{digits}g}")


def to_decimal(s: str | None) -> Decimal:
    return Decimal(s or "0")


# ------------------------------------------------------------------------------ jobs and recommendations


def milli(j: JobOut) -> int:
    """Thousandths of a GPU per GPU asked for, as the store keeps it: 1000 for whole GPUs, the fraction,
    or a MIG slice's share (the API shows the slice's profile, not its share)."""
    from gpufleet.model.gpu import GPU_MODELS, MILLI

    if j.gpu_milli is not None:
        return j.gpu_milli
    if j.mig:
        for name in [*j.gpu_types, *GPU_MODELS]:
            model = GPU_MODELS.get(name)
            profile = model.mig_profile(j.mig) if model is not None else None
            if profile is not None:
                return profile.milli
    return MILLI


def job_gpus(j: JobOut) -> float:
    """GPU-equivalents a job holds: pods × GPUs × share (as the API's budget estimates count them)."""
    from gpufleet.model.share import milli_gpus

    return milli_gpus(max(1, j.pods) * j.gpus * milli(j))


def to_recommendation(r: RecommendationOut) -> Recommendation:
    return Recommendation(**r.model_dump())


def recommendation_job(r: RecommendationOut) -> str | None:
    return r.target.removeprefix("job:") if r.target.startswith("job:") else None


# ------------------------------------------------------------------------------------------------- scope


def scope_of(team: str | None) -> str:
    return "all" if team is None else f"team:{team}"


def check_team(client: Client, team: str | None) -> None:
    """Ask the API for the team: another team's is a 404 for a token other than admin (its own rule)."""
    if team is not None:
        client.team(team)
