"""Whether the worker may claim: only while it can renew what it claims (no I/O; the time is
an argument, so it is tested fast and exactly).

Invariants:
- Claims are allowed only while the heartbeater holds a connection and its last successful
  round trip was sent no longer ago than the beat interval plus `grace` (a third of the lease):
  a worker that cannot renew would hand out leases that run out under running handlers, and
  the reaper would give their jobs to someone else while they still run.
- A round trip counts from when it was sent, so the gate's view is never later than the
  server's.
- Each change is reported once (`note`): why claiming stopped, and that it resumed.
"""

from __future__ import annotations


class RenewalGate:
    """Opens on the heartbeater's first successful round trip; closes when its connection is
    gone or it has not renewed for `interval + grace` seconds."""

    def __init__(self, interval: float, grace: float) -> None:
        self.interval = interval
        self.grace = grace
        self._connected = False
        self._renewed_at: float | None = None
        self._failure: str | None = None
        self._refused = False
        self._noted_open = True  # the first connect, until it fails, is not worth a line

    def renewed(self, sent_at: float) -> None:
        """A round trip sent at `sent_at` succeeded."""
        self._connected = True
        self._refused = False
        if self._renewed_at is None or sent_at > self._renewed_at:
            self._renewed_at = sent_at

    def failed(self, reason: str, *, connected: bool, refused: bool = False) -> None:
        """A round trip (or a connect) failed; `connected`: the connection is still usable;
        `refused`: the database refused it for good (permission denied), not for now."""
        self._connected = connected
        self._failure = reason
        self._refused = refused

    def refusal(self, now: float) -> str | None:
        """Why claims stay stopped until an operator acts (renewals refused), else None."""
        if self._refused and not self.may_claim(now):
            return self._failure
        return None

    def why_not(self, now: float) -> str | None:
        """None while claims are allowed, else why not."""
        if not self._connected:
            return f"no heartbeat connection ({self._failure or 'connecting'})"
        if self._renewed_at is None:
            return "no heartbeat has succeeded yet"
        silent = now - self._renewed_at
        if silent > self.interval + self.grace:
            why = self._failure or "no reply yet"
            return f"no heartbeat has succeeded for {silent:.1f}s ({why})"
        return None

    def may_claim(self, now: float) -> bool:
        return self.why_not(now) is None

    @property
    def renewed_at(self) -> float | None:
        """When the latest successful round trip was sent (time.monotonic()), if any."""
        return self._renewed_at

    def note(self, now: float) -> str | None:
        """What to log once when the gate changed since the last note, else None."""
        why = self.why_not(now)
        first_connect = self._renewed_at is None and self._failure is None
        if why is not None and self._noted_open and not first_connect:
            self._noted_open = False
            return f"not claiming: {why}; leases claimed now could not be renewed"
        if why is None and not self._noted_open:
            self._noted_open = True
            return "heartbeats succeed again; claiming resumes"
        return None
