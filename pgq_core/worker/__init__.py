"""The worker runtime, as named parts (River's producer / completer / rescuer / notifier split):

- `policy`: when to claim and from which queue, how many jobs to claim ahead, when to settle,
  how long to back off (no I/O);
- `link`: the statement connection and what a failed statement means;
- `lanes`: the two statement connections steps take turns on (the second opened under load);
- `stdio`: file descriptors 0-2 kept for log lines, never taken by a socket;
- `settler`: finished handlers to one settlement each, with the next claim, split per job
  when the database refuses one job's data;
- `runner`: running handlers (threads, async tasks, the ones given up) to one outcome each;
- `heartbeater`: leases kept alive from a thread and a connection of their own;
- `renewal`: whether leases are being renewed, so claims stop when they are not (no I/O);
- `reaper`: expired leases back to ready or dead;
- `scheduler`: the due slots of schedules (periodic jobs) enqueued, each once;
- `listener`: LISTEN for new jobs (a hint; polling stays the fallback);
- `metrics`: the worker's own Prometheus figures (`pgq worker --metrics-port`);
- `ledger`: the held jobs, the claim-ahead buffer, the pending settlements and the counts
  (no I/O, its clock given);
- `dispatch`: claimed jobs onto handler slots, endings and settlements into the ledger, the
  room for the next claim;
- `step`: one settle-and-claim step (River's producer);
- `mainloop`: what the worker runs next (an orphan check, the buffer handed back, a step) and
  how long it waits;
- `handback`: what the worker holds and will not run, given back at once;
- `background`: the listener, reaper and scheduler tasks beside the main loop, and its chores;
- `registry`: the worker's own row in `workers`, beaten every few seconds, gone when it stops;
- `context`: `JobContext`, what a handler gets: its job, fence, progress, lost lease;
- `snapshot`: what a worker reports of itself (`Worker.snapshot()`);
- `signals`: SIGTERM/SIGINT stop a worker, gracefully then at once;
- `state`: the worker's `State`, its legal edges and its one `transition()` (no I/O);
- `runtime`: the `Worker` that composes them and runs them through its states.
"""

from .context import JobContext
from .runner import Handler, load_handler
from .runtime import Worker
from .signals import catch_stop_signals, run_until_stopped
from .snapshot import RunningJob, WorkerSnapshot

__all__ = [
    "Handler",
    "JobContext",
    "RunningJob",
    "Worker",
    "WorkerSnapshot",
    "catch_stop_signals",
    "load_handler",
    "run_until_stopped",
]
