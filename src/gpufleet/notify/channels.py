"""Alert channels: where a budget alert goes, validated up front and delivered with timeouts.

Kinds (``{"type": ..., ...}`` in a budget's ``channels``):

- ``webhook``: ``url`` (http/https), optional ``headers``: the alert as a JSON object POSTed;
- ``slack``: ``url`` of a Slack (or compatible: Mattermost, Rocket.Chat) incoming webhook:
  ``{"text": ..., "blocks": [...]}``;
- ``email``: ``host``, ``port`` (25), ``from``, ``to`` (list), optional ``starttls`` (false),
  ``username``/``password`` (login after STARTTLS), sent with :mod:`smtplib`;
- ``pagerduty``: ``routing_key``, optional ``url`` (default the Events API v2 enqueue endpoint):
  an ``event_action: trigger`` event whose ``dedup_key`` is the crossing's (budget/period/threshold),
  so PagerDuty folds a re-delivery into the same incident.

Every kind takes ``timeout_s`` (default 10). A delivery that fails raises :class:`DeliveryError`; the
outbox (:mod:`gpufleet.notify.outbox`) retries it. Validation errors name the field
(``channels[1].url``).
"""

from __future__ import annotations

import math
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from gpufleet.cost.budgets.status import ANOMALY_PAYLOAD_KIND
from gpufleet.errors import GpufleetError, InputError

PAGERDUTY_URL: Final = "https://events.pagerduty.com/v2/enqueue"
DEFAULT_TIMEOUT_S: Final = 10.0
SECRET_FIELDS: Final = frozenset({"password", "routing_key"})
_SEVERITY_PD: Final = {"info": "info", "warning": "warning", "critical": "critical"}
_PD_DETAILS: Final = {
    False: ("spend_usd", "limit_usd", "percent", "threshold", "period_start"),
    True: ("spend_usd", "baseline_usd", "increase_usd", "day", "causes", "action", "savings_usd_per_day"),
}
_EMOJI: Final = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}


class DeliveryError(GpufleetError):
    """A channel did not accept an alert (network error, timeout, non-2xx answer, SMTP error)."""

    code = "delivery_failed"


@dataclass(frozen=True, slots=True)
class WebhookChannel:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    type: str = "webhook"


@dataclass(frozen=True, slots=True)
class SlackChannel:
    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    type: str = "slack"


@dataclass(frozen=True, slots=True)
class EmailChannel:
    host: str
    from_addr: str
    to: tuple[str, ...]
    port: int = 25
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    type: str = "email"


@dataclass(frozen=True, slots=True)
class PagerDutyChannel:
    routing_key: str
    url: str = PAGERDUTY_URL
    timeout_s: float = DEFAULT_TIMEOUT_S
    type: str = "pagerduty"


Channel = WebhookChannel | SlackChannel | EmailChannel | PagerDutyChannel

_FIELDS: Final = {
    "webhook": {"type", "url", "headers", "timeout_s"},
    "slack": {"type", "url", "timeout_s"},
    "email": {"type", "host", "port", "from", "to", "starttls", "username", "password", "timeout_s"},
    "pagerduty": {"type", "routing_key", "url", "timeout_s"},
}


def _url(d: Mapping[str, Any], where: str, key: str = "url", default: str | None = None) -> str:
    value = d.get(key, default)
    if not isinstance(value, str) or not value:
        raise InputError("required: an http(s) URL", field=f"{where}.{key}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"not an http(s) URL: {value!r}", field=f"{where}.{key}")
    return value


def _str(d: Mapping[str, Any], where: str, key: str, *, required: bool = True) -> str | None:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError("required: a non-empty string", field=f"{where}.{key}")
    return value.strip()


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str) or "@" not in value or any(c in value for c in "\r\n"):
        raise InputError(f"not an email address: {value!r}", field=where)
    return value.strip()


def _timeout(d: Mapping[str, Any], where: str) -> float:
    value = d.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and 0 < value <= 120):
        raise InputError(f"timeout_s must be in (0, 120] seconds, got {value!r}", field=f"{where}.timeout_s")
    return float(value)


def parse_channel(d: Mapping[str, Any], where: str = "channel") -> Channel:
    """A channel from its JSON form; :class:`InputError` naming ``<where>.<field>`` when invalid."""
    if not isinstance(d, Mapping):
        raise InputError("a channel is an object with a 'type'", field=where)
    kind = d.get("type")
    if kind not in _FIELDS:
        raise InputError(f"unknown channel type {kind!r} (known: {', '.join(_FIELDS)})", field=f"{where}.type")
    unknown = set(d) - _FIELDS[kind]
    if unknown:
        raise InputError(f"unknown field(s) for a {kind} channel: {', '.join(sorted(unknown))}", field=where)
    timeout = _timeout(d, where)
    if kind == "webhook":
        headers = d.get("headers", {}) or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise InputError("headers must map names to string values", field=f"{where}.headers")
        return WebhookChannel(_url(d, where), dict(headers), timeout)
    if kind == "slack":
        return SlackChannel(_url(d, where), timeout)
    if kind == "pagerduty":
        key = _str(d, where, "routing_key")
        assert key is not None
        return PagerDutyChannel(key, _url(d, where, default=PAGERDUTY_URL), timeout)
    host = _str(d, where, "host")
    assert host is not None
    port = d.get("port", 25)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InputError(f"port must be 1..65535, got {port!r}", field=f"{where}.port")
    sender = _address(d.get("from"), f"{where}.from")
    to = d.get("to")
    if isinstance(to, str):
        to = [to]
    if not isinstance(to, Sequence) or not to:
        raise InputError("required: a list of recipient addresses", field=f"{where}.to")
    recipients = tuple(_address(a, f"{where}.to[{i}]") for i, a in enumerate(to))
    starttls = d.get("starttls", False)
    if not isinstance(starttls, bool):
        raise InputError("starttls is true or false", field=f"{where}.starttls")
    username = _str(d, where, "username", required=False)
    password = d.get("password")
    if password is not None and not isinstance(password, str):
        raise InputError("password must be a string", field=f"{where}.password")
    if (username is None) != (password is None):
        raise InputError("give both username and password, or neither", field=f"{where}.username")
    return EmailChannel(host, sender, recipients, port, starttls, username, password, timeout)


def validate_channels(channels: Sequence[Mapping[str, Any]], where: str = "channels") -> list[Channel]:
    return [parse_channel(c, f"{where}[{i}]") for i, c in enumerate(channels)]


def masked(channel: Mapping[str, Any]) -> dict[str, Any]:
    """The channel's JSON with its secrets (password, routing key) hidden, for display to admins."""
    return {k: ("***" if k in SECRET_FIELDS and v else v) for k, v in channel.items()}


def _masked_url(value: Any) -> str:
    """Scheme and host only: no user:password@, path, query or fragment (``https://host/…``)."""
    parts = urlsplit(value if isinstance(value, str) else "")
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.scheme or not host:
        return "…"
    return f"{parts.scheme}://{host}{'' if port is None else f':{port}'}/…"


def _masked_address(value: Any) -> str:
    """``a***@example.com``: the first character of the local part and the domain."""
    local, at, domain = str(value).strip().rpartition("@")
    return f"{local[:1]}***@{domain}" if at else "***"


def public_channel(channel: Mapping[str, Any]) -> dict[str, Any]:
    """What a non-admin sees of a channel: its kind and a masked target — a URL's scheme and host,
    recipients as ``a***@example.com``, the last 4 characters of a PagerDuty routing key. Never a
    path, query, user:password@, header, SMTP host, login or password."""
    kind = str(channel.get("type", ""))
    if kind == "email":
        to = channel.get("to")
        recipients = [to] if isinstance(to, str) else list(to) if isinstance(to, Sequence) else []
        target = ", ".join(_masked_address(a) for a in recipients) or "***"
    elif kind == "pagerduty":
        key = str(channel.get("routing_key") or "")
        target = f"routing key ***{key[-4:]}" if len(key) >= 16 else "routing key ***"
    else:
        target = _masked_url(channel.get("url"))
    return {"type": kind, "target": target}


# -- payloads -------------------------------------------------------------------------------------------


def is_anomaly(alert: Mapping[str, Any]) -> bool:
    """A cost-anomaly alert (compared with a baseline, not a limit: formatted on its own terms)."""
    return alert.get("kind") == ANOMALY_PAYLOAD_KIND


def _context(alert: Mapping[str, Any]) -> str:
    if is_anomaly(alert):
        return (
            f"spend ${alert['spend_usd']:,.2f} vs baseline ${alert['baseline_usd']:,.2f} "
            f"(+${alert['increase_usd']:,.2f}) · day {alert['day']} · key `{alert['dedup_key']}`"
        )
    return (
        f"spend ${alert['spend_usd']:,.2f} of ${alert['limit_usd']:,.2f} "
        f"({alert['percent']:.1f}%) · period from {alert['period_start']} · "
        f"key `{alert['dedup_key']}`"
    )


def slack_payload(alert: Mapping[str, Any]) -> dict[str, Any]:
    sev = str(alert.get("severity", "warning"))
    text = f"{_EMOJI.get(sev, '')} [{sev}] {alert['message']}".strip()
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": _context(alert)}]},
        ],
    }


def pagerduty_payload(alert: Mapping[str, Any], routing_key: str) -> dict[str, Any]:
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": alert["dedup_key"],
        "payload": {
            "summary": str(alert["message"])[:1024],
            "source": "gpufleet",
            "severity": _SEVERITY_PD.get(str(alert.get("severity")), "warning"),
            "component": f"budget/{alert['budget']}",
            "group": str(alert.get("scope", "")),
            "class": "budget_anomaly" if is_anomaly(alert) else "budget",
            "custom_details": {k: alert[k] for k in _PD_DETAILS[is_anomaly(alert)] if k in alert},
        },
    }


def email_message(alert: Mapping[str, Any], channel: EmailChannel) -> EmailMessage:
    msg = EmailMessage()
    sev = alert.get("severity", "warning")
    if is_anomaly(alert):  # the finding itself: the day, who rose most, the change that fixes it
        msg["Subject"] = f"[gpufleet {sev}] {alert['message']}"
    else:
        msg["Subject"] = f"[gpufleet {sev}] budget {alert['budget']}: {alert['threshold']:g}%"
    msg["From"] = channel.from_addr
    msg["To"] = ", ".join(channel.to)
    # a stable Message-ID per crossing: mail clients and gateways thread/drop re-deliveries
    msg["Message-ID"] = f"<{str(alert['dedup_key']).replace('/', '.')}@gpufleet>"
    msg["X-Gpufleet-Dedup-Key"] = str(alert["dedup_key"])
    if is_anomaly(alert):
        msg.set_content(
            f"{alert['message']}\n\nday: {alert['day']} (from {alert['period_start']})\n"
            f"spend: ${alert['spend_usd']:,.2f}\nbaseline: ${alert['baseline_usd']:,.2f}\n"
            f"increase: ${alert['increase_usd']:,.2f}\nsaves: ${alert['savings_usd_per_day']:,.2f}/day\n"
        )
    else:
        msg.set_content(
            f"{alert['message']}\n\nspend: ${alert['spend_usd']:,.2f}\nlimit: ${alert['limit_usd']:,.2f}\n"
            f"percent: {alert['percent']:.1f}%\nperiod start: {alert['period_start']}\n"
        )
    return msg


# -- delivery -------------------------------------------------------------------------------------------


def _post(url: str, body: Mapping[str, Any], timeout: float, headers: Mapping[str, str], dedup: str) -> None:
    try:
        resp = httpx.post(
            url,
            json=dict(body),
            headers={"Idempotency-Key": dedup, "X-Gpufleet-Dedup-Key": dedup, **headers},
            timeout=timeout,
        )
    except httpx.HTTPError as e:
        raise DeliveryError(f"POST {url}: {type(e).__name__}: {e}") from e
    if not 200 <= resp.status_code < 300:
        raise DeliveryError(f"POST {url}: HTTP {resp.status_code} {resp.text[:200]}")


def deliver(channel: Channel, alert: Mapping[str, Any]) -> None:
    """Send one alert through one channel (blocking, bounded by the channel's timeout)."""
    dedup = str(alert["dedup_key"])
    if isinstance(channel, WebhookChannel):
        _post(channel.url, alert, channel.timeout_s, channel.headers, dedup)
    elif isinstance(channel, SlackChannel):
        _post(channel.url, slack_payload(alert), channel.timeout_s, {}, dedup)
    elif isinstance(channel, PagerDutyChannel):
        _post(channel.url, pagerduty_payload(alert, channel.routing_key), channel.timeout_s, {}, dedup)
    else:
        _send_mail(channel, alert)


def _send_mail(channel: EmailChannel, alert: Mapping[str, Any]) -> None:
    try:
        with smtplib.SMTP(channel.host, channel.port, timeout=channel.timeout_s) as smtp:
            if channel.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if channel.username is not None and channel.password is not None:
                smtp.login(channel.username, channel.password)
            smtp.send_message(email_message(alert, channel))
    except (OSError, smtplib.SMTPException) as e:
        raise DeliveryError(f"SMTP {channel.host}:{channel.port}: {type(e).__name__}: {e}") from e
