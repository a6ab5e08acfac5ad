"""The settler (River's completer): finished handlers to settlements, and the next claim.

Invariants:
- One step is one transaction and one round trip: the hand-backs of jobs whose handler's
  transaction the database failed (`hand_back`, one per reason: the attempt not counted), the
  snoozes (`settle_snooze`), the failures (`settle_fail`), then the completions together
  with the next claim (`settle_complete_and_claim`), pipelined.
- A statement that fails for its data never holds back another job's settlement: the step is
  split, the claim made alone and each job settled alone; a completion the database refuses
  becomes a failure, an error text it refuses is replaced, and a job it still refuses is
  reported `refused`, never retried as-is.
- Nothing here waits on a row lock: a row another session holds comes back `busy`.
- A job is reported `done` only when a completion at its fence committed (ours, or its own in
  the handler's transaction); a write that matched no row is reported `lost`.
- Connection loss and transient failures are the caller's: the jobs not yet settled come back
  as `retry`, marked uncertain when their statement may have committed unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from .. import ops
from ..models import Job, Settled
from ..ops import Op
from ..text import printable
from .ledger import Held, StepResult
from .link import DataFault, Disconnected, Transient
from .runner import Outcome

log = logging.getLogger("pgq.worker")

__all__ = ["Call", "Held", "Settler", "StepResult"]

#: How the settler runs a step: the worker's statement link (with its transient backoff).
Call = Callable[..., Awaitable[list[Any]]]


class Settler:
    """Settles finished jobs for worker `worker_id` and claims `lease`-long jobs with it."""

    def __init__(self, call: Call, worker_id: str, lease: timedelta, retry_base: float) -> None:
        """`call`: the connection steps run on unless given their own."""
        self.call = call
        self._worker_id = worker_id
        self._lease = lease
        self._retry_base = retry_base

    async def step(
        self, batch: list[Held], queue: str | None, free: int, call: Call | None = None
    ) -> StepResult:
        """Settle `batch` (each with its outcome) and, with `queue`, claim up to `free` jobs
        of it, in one transaction on `call` (default: `self.call`); split apart only when a
        statement fails for its data. Raises Disconnected or Transient when nothing can be
        known of the step."""
        run = call or self.call
        try:
            return await self._together(batch, queue, free, run)
        except DataFault as exc:
            return await self._apart(batch, queue, free, exc, run)

    async def _together(
        self, batch: list[Held], queue: str | None, free: int, call: Call
    ) -> StepResult:
        completes = [h for h in batch if h.outcome is not None and h.outcome.succeeded]
        faulted = _by_reason([h for h in batch if h.outcome is not None and h.outcome.faulted])
        snoozes = [h for h in batch if h.outcome is not None and h.outcome.kind == "snoozed"]
        fails = [
            h
            for h in batch
            if h.outcome is not None
            and not h.outcome.succeeded
            and not h.outcome.faulted
            and h.outcome.kind != "snoozed"
        ]
        step: list[Op[Any]] = [self._hand_back_op(group) for group in faulted]
        if snoozes:
            step.append(self._snooze_op(snoozes))
        if fails:
            step.append(self._fail_op(fails))
        if queue is not None or completes:
            step.append(self._complete_op(completes, queue or "", free if queue else 0))
        result = StepResult()
        if not step:
            return result
        results = await call(*step)
        for group in faulted:
            _read_hand_backs(group, results.pop(0), result)
        if snoozes:
            _read_snoozes(snoozes, results.pop(0), result)
        if fails:
            _read_fails(fails, results.pop(0), result)
        if results:
            settled, result.claimed = results.pop(0)
            _read_completes(completes, settled, result)
        return result

    async def _apart(
        self, batch: list[Held], queue: str | None, free: int, fault: DataFault, call: Call
    ) -> StepResult:
        """A statement of the step failed for its data: the claim alone, then each job alone,
        so one job's data never holds back another's settlement."""
        log.warning(
            "worker %s: settlement of %d job(s) refused (%s: %s); settling them one by one",
            self._worker_id,
            len(batch),
            fault.sqlstate,
            printable(str(fault)),
        )
        result = StepResult()
        pending = list(batch)
        try:
            if queue is not None:
                try:
                    op = ops.claim(queue, free, self._lease, self._worker_id)
                    (result.claimed,) = await call(op)
                except DataFault as exc:
                    result.claim_refused = str(exc)
            for h in batch:
                await self._alone(h, result, call)
                pending.remove(h)
        except (Disconnected, Transient) as exc:
            result.retry += pending
            for h in pending:
                h.uncertain = h.uncertain or isinstance(exc, Disconnected)
        return result

    async def _alone(self, h: Held, result: StepResult, call: Call) -> None:
        """One job: complete, fail, or fail with a text the database accepts; a job that still
        cannot be settled is refused (its lease runs out and the reaper retries it)."""
        assert h.outcome is not None
        if h.outcome.kind == "snoozed":
            try:
                (settled,) = await call(self._snooze_op([h]))
                _read_snoozes([h], settled, result)
            except DataFault:
                result.refused.append(h)
            return
        if h.outcome.faulted:
            try:
                (settled,) = await call(self._hand_back_op([h]))
                _read_hand_backs([h], settled, result)
                return
            except DataFault as exc:
                h.outcome = Outcome("raised", f"hand-back refused by the database: {exc}")
        if h.outcome.succeeded:
            try:
                ((settled, _),) = await call(self._complete_op([h], "", 0))
                _read_completes([h], settled, result)
                return
            except DataFault as exc:
                h.outcome = Outcome("raised", f"completion refused by the database: {exc}")
        for replace in (False, True):
            try:
                (settled,) = await call(self._fail_op([h], replace_text=replace))
                _read_fails([h], settled, result)
                return
            except DataFault:
                continue
        result.refused.append(h)

    def _complete_op(
        self, completes: list[Held], queue: str, limit: int
    ) -> Op[tuple[Settled, list[Job]]]:
        pairs = [(h.job.id, h.job.fence) for h in completes]
        values = [h.outcome.result if h.outcome else None for h in completes]
        return ops.complete_and_claim(pairs, queue, limit, self._lease, self._worker_id, values)

    def _hand_back_op(self, faulted: list[Held]) -> Op[Settled]:
        """Jobs whose handler's transaction the database failed, all for one reason: back to
        ready at once, the attempt not counted, the reason in the history."""
        assert faulted[0].outcome is not None
        reason = f"database fault in the handler's transaction ({faulted[0].outcome.error})"
        pairs = [(h.job.id, h.job.fence) for h in faulted]
        return ops.hand_back(pairs, self._worker_id, reason)

    def _snooze_op(self, snoozes: list[Held]) -> Op[Settled]:
        pairs = [(h.job.id, h.job.fence) for h in snoozes]
        delays = [h.outcome.delay if h.outcome else 0.0 for h in snoozes]
        return ops.settle_snooze(pairs, delays, self._worker_id)

    def _fail_op(self, fails: list[Held], replace_text: bool = False) -> Op[Settled]:
        triples = []
        for h in fails:
            assert h.outcome is not None
            error = h.outcome.error or h.outcome.kind
            if replace_text:
                error = f"{h.outcome.kind}: the error text was refused by the database"
            triples.append((h.job.id, h.job.fence, error))
        finals = [h.outcome is not None and h.outcome.final for h in fails]
        stacks = [None if replace_text or h.outcome is None else h.outcome.traceback for h in fails]
        return ops.settle_fail(
            triples, self._worker_id, base=self._retry_base, final=finals, tracebacks=stacks
        )


def _by_reason(faulted: list[Held]) -> list[list[Held]]:
    """Faulted jobs grouped by their reason (one hand-back statement per reason)."""
    groups: dict[str | None, list[Held]] = {}
    for h in faulted:
        groups.setdefault(h.outcome.error if h.outcome else None, []).append(h)
    return list(groups.values())


def _read_hand_backs(faulted: list[Held], settled: Settled, result: StepResult) -> None:
    by_id = {h.job.id: h for h in faulted}
    result.released += [by_id[i] for i in settled.applied]
    result.busy += [by_id[i] for i in settled.busy]
    result.lost += [(by_id[i], "hand back") for i in settled.lost]


def _read_completes(completes: list[Held], settled: Settled, result: StepResult) -> None:
    by_id = {h.job.id: h for h in completes}
    result.done += [by_id[i] for i in settled.applied + settled.already_done]
    result.busy += [by_id[i] for i in settled.busy]
    result.lost += [(by_id[i], "complete") for i in settled.lost]


def _read_snoozes(snoozes: list[Held], settled: Settled, result: StepResult) -> None:
    by_id = {h.job.id: h for h in snoozes}
    result.snoozed += [by_id[i] for i in settled.applied]
    result.busy += [by_id[i] for i in settled.busy]
    result.done += [by_id[i] for i in settled.already_done]  # it completed itself, then snoozed
    result.lost += [(by_id[i], "snooze") for i in settled.lost]


def _read_fails(fails: list[Held], settled: Settled, result: StepResult) -> None:
    by_id = {h.job.id: h for h in fails}
    result.failed += [by_id[i] for i in settled.applied]
    result.busy += [by_id[i] for i in settled.busy]
    for i in settled.already_done:  # it completed itself in its own transaction, then raised
        log.info("job %d: failed after completing itself; kept done", i)
        result.done.append(by_id[i])
    for i in settled.lost:  # a completion of its own that did not commit is no help here
        h = by_id[i]
        if h.uncertain:  # our failure committed before the connection broke
            result.failed.append(h)
        else:
            result.lost.append((h, "fail"))
