"""Alert delivery: channels (webhook, Slack, email, PagerDuty) and the retrying outbox."""

from gpufleet.notify.channels import Channel, DeliveryError, deliver, masked, parse_channel, validate_channels
from gpufleet.notify.outbox import DispatchStats, Outbox

__all__ = [
    "Channel",
    "DeliveryError",
    "DispatchStats",
    "Outbox",
    "deliver",
    "masked",
    "parse_channel",
    "validate_channels",
]
