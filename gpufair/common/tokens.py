"""Per-job bearer tokens: HMAC(secret, job id), so a job's trainers can act on it alone."""

from __future__ import annotations

import hashlib
import hmac


class JobTokens:
    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    @property
    def enabled(self) -> bool:
        return bool(self._secret)

    def issue(self, job_id: str) -> str:
        """`job.<id>.<mac>`, or "" when authentication is off."""
        if not self._secret:
            return ""
        mac = hmac.new(self._secret, job_id.encode(), hashlib.sha256).hexdigest()
        return f"job.{job_id}.{mac}"

    def job_of(self, token: str) -> str | None:
        """The job a token is valid for, or None."""
        if not self._secret or not token.startswith("job."):
            return None
        job_id, _, mac = token[4:].rpartition(".")
        expected = hmac.new(self._secret, job_id.encode(), hashlib.sha256).hexdigest()
        return job_id if job_id and hmac.compare_digest(mac, expected) else None
