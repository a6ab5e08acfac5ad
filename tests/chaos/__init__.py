"""Chaos runs kept with the tests that use them: the fleet (workers through PgBouncer under
SIGKILL and SIGSTOP, `fleet.py`) and its PgBouncer (`bouncer.py`)."""
