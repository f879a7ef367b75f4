"""The SNS notification for a hot key: a short subject for email, a JSON body for machines."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: SNS limits the subject to 100 printable ASCII characters.
SUBJECT_MAX = 100


class PublishApi(Protocol):
    def publish(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Alert:
    """One notification. ``subject_key`` names what the cooldown is kept for."""

    subject_key: str
    subject: str
    body: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class AlertPublisher:
    sns: PublishApi
    topic_arn: str

    def publish(self, alert: Alert) -> str:
        """Send it; returns the SNS message id. Errors propagate (the caller releases the cooldown)."""
        subject = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in alert.subject)[:SUBJECT_MAX]
        response = self.sns.publish(
            TopicArn=self.topic_arn,
            Subject=subject,
            Message=json.dumps(alert.body, sort_keys=True, indent=2),
            MessageAttributes={"kind": {"DataType": "String", "StringValue": str(alert.body.get("kind", "hot_key"))}},
        )
        return str(response.get("MessageId", ""))
