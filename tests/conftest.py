"""Fixtures: a real PostgreSQL (embedded by default, PGQ_TEST_DSN for any other) and a migrated
schema per test that no other test has left anything in (tests/schema_pool.py), so tests never
see each other's jobs, objects or sessions."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

# Textual draws at most TEXTUAL_FPS frames a second (read once, when textual is imported): 20
# in the tests (and the dashboards they spawn), not 60, so that a burst of updates is one
# frame, not three. Pilot and the tests wait for what they assert, never for a frame count;
# the TUI files used 8% less CPU so (49.6 -> 45.8 s at -n 0).
os.environ.setdefault("TEXTUAL_FPS", "20")

import psycopg
import pytest
import textual._wait as textual_wait
from click.testing import Result
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from schema_pool import SchemaPool
from support import (
    ENV,
    POOL_SIZE,
    OwnServer,
    Pgq,
    conninfo_quote,
    free_port,
    memory_dir,
    private_database,
    server_root,
)

from pgq_core import AsyncQueue, Queue

# Pilot's key presses and pauses wait until the app looks idle, sampling CPU time every 20 ms;
# every press costs at least two samples. A 5 ms sample (and an idle threshold in proportion)
# lets the TUI tests' many presses run about a quarter faster; what they assert they still
# wait for by name (`wait_for`, `settle`).
textual_wait.SLEEP_GRANULARITY = 1 / 200
textual_wait.SLEEP_IDLE = textual_wait.SLEEP_GRANULARITY / 4

# A worker's transition along an edge its state diagram does not draw raises here, in every
# worker the tests run (in-process or spawned), instead of being logged (worker/state.py).
os.environ["PGQ_STRICT_STATES"] = "1"


@pytest.fixture(scope="session")
def pg_home() -> Iterator[Path]:
    """The embedded server's home, in memory when there is a tmpfs (support.memory_dir): the
    server's writes and fsyncs then wait on no disk that other processes share. Its server is
    stopped and the home removed at the end of the session."""
    home = memory_dir("pgq-home-")
    try:
        yield home
    finally:
        from pgq_core import embedded

        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def dsn(pg_home: Path) -> str:
    """The server every database test uses."""
    external = os.environ.get("PGQ_TEST_DSN")
    if external:
        return external
    from pgq_core import embedded

    return embedded.start(pg_home)


_POOL = pytest.StashKey[SchemaPool]()


@pytest.fixture(scope="session")
def schema_pool(dsn: str, pytestconfig: pytest.Config) -> Iterator[SchemaPool]:
    """This process's migrated schemas (tests/schema_pool.py); all dropped at the end."""
    pool = SchemaPool(dsn)
    pytestconfig.stash[_POOL] = pool
    try:
        yield pool
    finally:
        del pytestconfig.stash[_POOL]
        pool.close()


@pytest.fixture
def schema(schema_pool: SchemaPool, request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated schema holding no rows but what migrating leaves, no object and no session
    another test left: fresh, or an earlier test's emptied and proved unchanged (see
    tests/schema_pool.py). `@pytest.mark.fresh_schema`: always a fresh one, dropped after."""
    name = schema_pool.take(fresh=request.node.get_closest_marker("fresh_schema") is not None)
    yield name
    schema_pool.give_back(name)


#: seconds a slow test (fleets, fresh venvs, chaos) may take before it counts as hung; the
#: others get pyproject's `timeout` (300)
SLOW_TIMEOUT = 1200


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


def pytest_sessionfinish() -> None:
    """The standby tests' template primary (tests/replication.py), if this process made one."""
    replication = sys.modules.get("replication")
    if replication is not None:
        replication.remove_template()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection() -> Iterator[None]:
    """pytest keeps each test module's assertion-rewritten code in __pycache__ (ignored by git)
    unless bytecode writing is off, as PYTHONDONTWRITEBYTECODE turns it off in some shells and
    images: then every xdist worker parses and rewrites all the test modules again, 5 CPU
    seconds of each run's start per worker (1.3 with the cache). Collecting writes it anyway;
    what runs after collecting sees the setting as it was."""
    was = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        yield
    finally:
        sys.dont_write_bytecode = was


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Once a test's teardown is complete (its connections closed), its schema is emptied and
    pooled, or dropped."""
    yield
    pool = item.config.stash.get(_POOL, None)
    if pool is not None:
        pool.settle()


@pytest.fixture
def own_database(dsn: str) -> Iterator[str]:
    """The DSN of a database of this test's own, dropped after it: on a server other tests
    share (PGQ_TEST_DSN, or two xdist workers on one server), their open snapshots hold back
    the cleanup horizon of their own database only."""
    with private_database(dsn) as own:
        yield own


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    """A throwaway server of this test's own, running, to stop, crash and start again."""
    if os.environ.get("PGQ_TEST_DSN"):
        pytest.skip(
            "PGQ_TEST_DSN is set: this test stops and starts its server, and only does so "
            "with a throwaway embedded one"
        )
    root = server_root("pgqr")
    server = OwnServer(root)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def queue(dsn: str, schema: str) -> Iterator[Queue]:
    with Queue.connect(dsn, schema) as q:
        yield q


@pytest.fixture
async def aqueue(dsn: str, schema: str) -> AsyncIterator[AsyncQueue]:
    q = await AsyncQueue.connect(dsn, schema)
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def pgq(dsn: str, schema: str) -> Pgq:
    """Runs `pgq --dsn <dsn> --schema <schema> ARGS...` in-process."""
    from click.testing import CliRunner

    from pgq_cli.cli import main

    runner = CliRunner(env=ENV)

    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(
            main, ["--dsn", dsn, "--schema", schema, *args], input=input, prog_name="pgq"
        )

    return run


@pytest.fixture(scope="module")
def bouncer(dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test server, pool of POOL_SIZE server
    connections; yields its DSN."""
    exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(exe).exists():
        pytest.skip("pgbouncer is not installed")
    server = conninfo_to_dict(dsn)
    user = str(server.get("user") or os.environ.get("USER") or "postgres")
    target = " ".join(
        f"{key}={conninfo_quote(str(server[key]))}"
        for key in ("host", "port", "dbname", "user", "password")
        if server.get(key)
    )
    home = tmp_path_factory.mktemp("pgbouncer")
    port = free_port()
    (home / "users.txt").write_text(f'"{user}" ""\n')
    ini = home / "pgbouncer.ini"
    ini.write_text(
        f"[databases]\npgq = {target}\n\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {home / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\n"
        f"max_db_connections = {POOL_SIZE}\nmax_client_conn = 500\n"
        f"ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {home / 'pgbouncer.log'}\npidfile = {home / 'pgbouncer.pid'}\n"
    )
    argv = [exe, str(ini)]
    if os.getuid() == 0:
        argv = ["unshare", "--user", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    pooled = make_conninfo(host="127.0.0.1", port=port, dbname="pgq", user=user, connect_timeout=5)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with psycopg.connect(pooled, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = home / "pgbouncer.log"
                    text = log.read_text() if log.exists() else ""
                    pytest.fail(f"pgbouncer did not start: {text}")
                time.sleep(0.1)
        yield pooled
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
