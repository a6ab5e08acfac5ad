"""Every code block of the README and of the docs site runs here, so no snippet can rot.

Per page, in the page's order, against the test server (`PGQ_DSN`) and a fresh schema
(`PGQ_SCHEMA`, also first on the search path of every connection, so the tables a snippet
creates are dropped with it), in a scratch directory:

- `python` blocks run in one namespace per page, like a session; a block whose first line is
  `# NAME.py` is a file the reader saves: it is written there and imported, and later blocks
  and commands use it;
- `sh` blocks run line by line (`&&` parts one by one): `pgq ...` and other commands for real,
  `pgq worker` with `--burst` so that it ends once the queues are drained, `pgq dashboard` and
  `pgq demo` headless until their first poll; what cannot run here is checked for what can
  be: `pip install` names only extras pyproject declares, the test, lint and docs commands are
  the ones .ci/run runs;
- `sql` blocks run with the schema `pgq.` standing for the fresh one.

A block in any other language fails: every block is run or checked.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import free_port

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CI = (ROOT / ".ci" / "run").read_text()
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FILE_BLOCK = re.compile(r"^# ([\w/]+\.py)\n")
LANGUAGES = {"python", "sh", "sql"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in FENCE.finditer(text)
    ]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --------------------------------------------------------------------------- shell commands


def without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (outside quotes, after a blank)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(code: str) -> Iterator[str]:
    """Each command of a shell block: lines joined at a trailing backslash, comments dropped,
    split at `&&`."""
    for line in code.replace("\\\n", " ").splitlines():
        line = without_comment(line)
        for part in line.split(" && "):
            if part.strip():
                yield part.strip()


class Page:
    """One page's run: its scratch directory, environment and Python namespace."""

    def __init__(self, dsn: str, schema: str, cwd: Path, monkeypatch: pytest.MonkeyPatch):
        self.dsn, self.schema, self.cwd = dsn, schema, cwd
        self.monkeypatch = monkeypatch
        # a module of its own, as a saved script would be (SQLAlchemy looks classes' modules up)
        self.module = types.ModuleType("docs_page")
        monkeypatch.setitem(sys.modules, "docs_page", self.module)
        self.namespace: dict[str, Any] = self.module.__dict__
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PGQ_")}
        self.env.update(
            PGQ_DSN=dsn,
            PGQ_SCHEMA=schema,
            PGQ_HOME=str(cwd / ".pgq-home-unused"),
            PGOPTIONS=f"-c search_path={schema}",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            COLUMNS="120",
        )
        self.env.pop("PYTHONPATH", None)
        for name in ("PGQ_DSN", "PGQ_SCHEMA", "PGQ_HOME", "PGOPTIONS"):
            monkeypatch.setenv(name, self.env[name])
        for name in [k for k in os.environ if k.startswith("PGQ_")]:
            if name not in self.env:
                monkeypatch.delenv(name)
        monkeypatch.chdir(cwd)
        monkeypatch.syspath_prepend(str(cwd))

    def run(self, block: Block) -> None:
        if block.language == "python":
            self.python(block)
        elif block.language == "sh":
            for command in commands(block.code):
                self.shell(command, block)
        elif block.language == "sql":
            self.sql(block)
        else:
            pytest.fail(f"{block.where}: a ```{block.language} block: no test runs it")

    def python(self, block: Block) -> None:
        saved = FILE_BLOCK.match(block.code)
        if saved:
            path = self.cwd / saved.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code)
            module = saved.group(1).removesuffix(".py").replace("/", ".")
            sys.modules.pop(module, None)
            done = self.process([sys.executable, "-c", f"import {module}"])
            assert done.returncode == 0, f"{block.where}: {module} does not import:\n{done.stderr}"
            return
        exec(compile(block.code, block.where, "exec"), self.namespace)

    def sql(self, block: Block) -> None:
        text = re.sub(r"\bpgq\.", f'"{self.schema}".', block.code)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(text.encode())

    def process(
        self, argv: list[str] | str, *, shell: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, shell=shell, executable="/bin/bash" if shell else None, env=self.env,
            cwd=self.cwd, capture_output=True, text=True, timeout=120, check=False,
        )

    def shell(self, command: str, block: Block) -> None:
        where = f"{block.where}: {command}"
        words = shlex.split(command)
        assignments = []
        while words and re.match(r"^[A-Z_]+=", words[0]):
            assignments.append(words.pop(0))
        words = [w.removeprefix(".venv/bin/") for w in words]
        name = words[0]
        if name == "pip" and words[1:2] == ["install"]:
            check_pip_install(words[2:], where)
        elif words[:3] in (["python3", "-m", "venv"], ["python", "-m", "venv"]):
            check_python_version(where)
        elif words[:3] == ["python", "-m", "pytest"]:
            check_test_command(words, assignments, where)
        elif name in ("ruff", "mypy", "lint-imports") or words[:2] == ["mkdocs", "build"]:
            assert f"\n{shlex.join(words)}\n" in CI, f"{where}: .ci/run does not run it"
        elif words[:2] == ["bash", ".ci/run"]:
            assert (ROOT / ".ci" / "run").is_file(), where
        elif words[:2] == ["pgq", "dashboard"] and "--web" in words:
            run_web_dashboard(self, words[1:], assignments, where)
        elif words[:2] in (["pgq", "dashboard"], ["pgq", "demo"]):
            run_dashboard_headless(self, words[1:], where)
        else:
            if name == "pgq":
                check_pgq_is_ours(self.env["PATH"], where)
            if words[:2] == ["pgq", "worker"] and "--burst" not in words:
                command += " --burst"
            done = self.process(re.sub(r"^\.venv/bin/", "", command), shell=True)
            assert done.returncode == 0, f"{where}: exit {done.returncode}\n{done.stderr}"


def check_pgq_is_ours(path: str, where: str) -> None:
    """The `pgq` a reader's shell runs is pgq-fence's: PgQueuer (the bench extra) installs a
    `pgq` too, and a pip command installing both may leave PgQueuer's."""
    found = shutil.which("pgq", path=path)
    assert found, f"{where}: no pgq on PATH"
    assert "pgq_cli" in Path(found).read_text(errors="replace"), (
        f"{where}: {found} is another project's pgq (PgQueuer's?): "
        "pip install --no-deps --force-reinstall -e . writes pgq-fence's again"
    )


def check_pip_install(args: list[str], where: str) -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    named = [a for a in args if not a.startswith("-")]
    assert named, where
    for requirement in named:
        match = re.fullmatch(r"(\.|pgq-fence)(?:\[([\w,]+)\])?", requirement)
        assert match, f"{where}: installs {requirement!r}, not pgq-fence"
        if match.group(1) == "pgq-fence":
            assert PYPROJECT["project"]["name"] == "pgq-fence", where
        for extra in filter(None, (match.group(2) or "").split(",")):
            assert extra in extras, f"{where}: pyproject has no extra {extra!r}"


def check_python_version(where: str) -> None:
    needed = PYPROJECT["project"]["requires-python"]
    low = tuple(int(n) for n in needed.removeprefix(">=").split("."))
    assert sys.version_info[: len(low)] >= low, f"{where}: needs Python {needed}"


def check_test_command(words: list[str], assignments: list[str], where: str) -> None:
    """The README's test command is the one CI runs, after installing the test extra; the
    variables it sets are ones the test fixtures read."""
    assert 'python -m pytest "$@"' in CI, f"{where}: .ci/run runs another test command"
    assert "-e '.[test" in CI, f"{where}: .ci/run does not install the test extra"
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    for assignment in assignments:
        assert assignment.split("=", 1)[0] in conftest, f"{where}: {assignment} is read nowhere"


#: `pgq ARGS` with the dashboard's app run headless until its first poll came back, then quit
#: with `q` (in a process of its own: the demo's hanging handlers end it with os._exit). The
#: key goes in without `pilot.press`, whose wait for the animator an exiting app may leave
#: unanswered; a hang anywhere still dumps every thread's stack before the test's timeout.
HEADLESS = """
import asyncio, faulthandler, sys, time
from textual import events
from pgq_tui.app import DashboardApp

faulthandler.enable()
faulthandler.dump_traceback_later(100, exit=True)

def headless(app, *args, **kwargs):
    async def drive():
        async with app.run_test(size=(132, 40)) as pilot:
            for _ in range(150):
                if app.polls:
                    break
                await pilot.pause(0.1)
            print(f"headless polls={app.polls}", file=sys.stderr, flush=True)
            key = events.Key("q", "q")
            key.set_sender(app)
            app._driver.send_message(key)
            deadline = time.monotonic() + 30
            while app.return_code is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            print(f"headless quit={app.return_code is not None}", file=sys.stderr, flush=True)
    asyncio.run(drive())

DashboardApp.run = headless
from pgq_cli.cli import main
main(sys.argv[1:], prog_name="pgq")
"""


def run_dashboard_headless(page: Page, args: list[str], where: str) -> None:
    """`pgq dashboard|demo ARGS` through the real command, its app headless (`HEADLESS`)."""
    done = page.process([sys.executable, "-c", HEADLESS, *args])
    assert done.returncode == 0, f"{where}: exit {done.returncode}\n{done.stderr}"
    polls = re.search(r"headless polls=(\d+)", done.stderr)
    assert polls and int(polls.group(1)) >= 1, f"{where}: the dashboard never polled"
    assert "headless quit=True" in done.stderr, f"{where}: q did not quit\n{done.stderr}"


def run_web_dashboard(page: Page, args: list[str], assignments: list[str], where: str) -> None:
    """`pgq dashboard --web ARGS` for real, on a free port (the host of --listen kept): its
    page answers, with the token it printed or was given, and only with it; then SIGTERM."""
    from tui_support.web import WebServer

    args = list(args)
    port = free_port()
    if "--listen" in args:
        at = args.index("--listen") + 1
        args[at] = f"{args[at].rpartition(':')[0]}:{port}"
    else:
        args += ["--listen", f"127.0.0.1:{port}"]
    env = {k: v for k, v in page.env.items() if k != "PGQ_WEB_TOKEN"}
    env.update(a.split("=", 1) for a in assignments)
    server = WebServer(args, env, cwd=page.cwd)
    try:
        token = env.get("PGQ_WEB_TOKEN", "")
        url = server.wait_started(timeout=60)
        url = url.replace("HOST", "127.0.0.1").replace("$PGQ_WEB_TOKEN", token)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert "textual-terminal" in response.read().decode(), f"{where}: not the page"
        if "?token=" in url:
            with pytest.raises(urllib.error.HTTPError, match="403"):
                urllib.request.urlopen(url.split("?")[0], timeout=10)
    finally:
        code = server.stop()
    assert code == 0, f"{where}: exit {code}\n{server.output()}"


# ------------------------------------------------------------------------------- the tests


def _after_readme(page: Page) -> None:
    """The first worker did its work: three greetings done, each with its result."""
    with psycopg.connect(page.dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT status, result FROM {}.jobs WHERE queue = 'hello' ORDER BY id"
            ).format(sql.Identifier(page.schema))
        ).fetchall()
    assert rows == [("done", f"greeted {name}") for name in ("Ada", "Grace", "Edsger")]


def _after_tutorial(page: Page) -> None:
    """The bill that died was requeued after the fix, and both bills are done."""
    with psycopg.connect(page.dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT status, attempts, result FROM {}.jobs WHERE queue = 'bills' ORDER BY id"
            ).format(sql.Identifier(page.schema))
        ).fetchall()
    assert rows == [("done", 1, "3 people pay 30.00 each"), ("done", 1, "nobody to pay")]


AFTER: dict[str, Callable[[Page], None]] = {
    "README.md": _after_readme,
    "docs/tutorial.md": _after_tutorial,
}


#: The README runs in the default suite (its quick start and first worker are the promise made
#: to every new user); the docs pages, ~25 s of subprocesses together, run with the slow tests.
PAGE_PARAMS = [
    pytest.param(
        page, marks=() if page == ROOT / "README.md" else pytest.mark.slow, id=_page_id(page)
    )
    for page in PAGES
]


@pytest.mark.parametrize("page", PAGE_PARAMS)
def test_every_code_block_of_the_page_runs(
    page: Path, dsn: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = blocks(page)
    if not found:
        pytest.skip("no code block")
    run = Page(dsn, schema, tmp_path, monkeypatch)
    loaded = set(sys.modules)
    try:
        for block in found:
            run.run(block)
    finally:
        for name in set(sys.modules) - loaded:
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(tmp_path)):
                del sys.modules[name]
    check = AFTER.get(_page_id(page))
    if check:
        check(run)


def test_every_block_is_in_a_language_the_tests_run() -> None:
    strays = [b.where for page in PAGES for b in blocks(page) if b.language not in LANGUAGES]
    assert strays == []


def test_the_quick_start_is_two_commands_and_the_second_is_ci_s_test_command() -> None:
    text = (ROOT / "README.md").read_text()
    quick = text[text.index("## Quick start") :]
    first = next(b for b in blocks(ROOT / "README.md") if b.code in quick[:2000])
    lines = first.code.strip().splitlines()
    assert len(lines) == 2, lines
    assert "pgq demo" in lines[0] and "-e '.[all]'" in lines[0]
    assert lines[1].endswith("python -m pytest") and "-e '.[test]'" in lines[1]


def test_the_readme_speaks_pgq_s_own_words() -> None:
    text = (ROOT / "README.md").read_text()
    assert "seed" not in text.lower()
    assert "../shared" not in text


@pytest.mark.parametrize("page", sorted((ROOT / "docs").rglob("*.md")), ids=_page_id)
def test_the_docs_speak_pgq_s_own_words(page: Path) -> None:
    """The benchmarks' baseline is "a plain-SQL baseline queue", never "the seed"; nothing links
    outside the repository."""
    text = page.read_text()
    assert re.findall(r"(?i)\bseed\b", text) == []
    assert "../shared" not in text


#: Commands documented on another page than the CLI reference, and where.
DOCUMENTED_ELSEWHERE = {"pgq bench": ROOT / "docs" / "performance.md"}


def _command_paths() -> list[str]:
    """Every command and subcommand `pgq --help` (and each group's `--help`) lists."""
    import click

    from pgq_cli.cli import main

    paths: list[str] = []

    def walk(group: click.Group, ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            sub = click.Context(command, info_name=name, parent=ctx)
            paths.append(sub.command_path)
            if isinstance(command, click.Group):
                walk(command, sub)

    walk(main, click.Context(main, info_name="pgq"))
    return paths


def test_every_command_has_an_entry_with_an_example_in_the_cli_reference() -> None:
    """A heading per command in docs/reference/cli.md, and in its section an example that runs
    it (in a code block, or inline for a command that serves until stopped)."""
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    sections = dict(
        re.findall(r"^#{2,4} `(pgq[\w -]*)`\n(.*?)(?=^#{2,4} |\Z)", page, re.M | re.S)
    )
    paths = _command_paths()
    assert "pgq worker" in paths and "pgq schedule add" in paths, paths
    missing, without_example = [], []
    for path in paths:
        if path in DOCUMENTED_ELSEWHERE:
            assert f"`{path}`" in DOCUMENTED_ELSEWHERE[path].read_text(), path
            continue
        if path not in sections:
            missing.append(path)
        elif not re.search(rf"(^|`){re.escape(path)}( |$|`)", sections[path], re.M):
            without_example.append(path)
    assert missing == [], "commands with no entry in docs/reference/cli.md"
    assert without_example == [], "entries with no example running the command"


#: The public API beyond `pgq_core.__all__`: what docs/reference/api.md says it is.
PUBLIC_BEYOND_ALL = {
    "pgq_core.worker": ["Worker", "JobContext"],
    "pgq_core.testing": ["private_schema", "PrivateSchema", "drain", "adrain", "bound", "eager"],
}


def test_every_public_name_has_an_entry_and_an_example_in_the_api_reference() -> None:
    """Each name `pgq_core` exports, and the few public names of its submodules, is rendered
    from its docstring (`::: module.NAME`, the object itself) and used in a code block of the
    page, which the docs tests run."""
    import importlib

    import pgq_core

    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    rendered = {}
    for target in re.findall(r"^::: ([\w.]+)$", page, re.M):
        module, _, name = target.rpartition(".")
        rendered[name] = getattr(importlib.import_module(module), name)
    code = "\n".join(b.code for b in blocks(ROOT / "docs" / "reference" / "api.md"))
    public = [(pgq_core, name) for name in pgq_core.__all__] + [
        (importlib.import_module(module), name)
        for module, names in PUBLIC_BEYOND_ALL.items()
        for name in names
    ]
    assert len(public) > 50
    missing = [name for module, name in public if rendered.get(name) is not getattr(module, name)]
    unused = [name for _, name in public if not re.search(rf"\b{name}\b", code)]
    assert missing == [], "public names docs/reference/api.md does not render"
    assert unused == [], "public names no example on docs/reference/api.md uses"


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "CHANGELOG.md"], ids=_page_id)
def test_relative_links_of_the_readme_lead_to_files(page: Path) -> None:
    """The docs site checks its own links (mkdocs build --strict); these pages are read on the
    forge and in the sdist, where a relative link must name a file that exists."""
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        assert (page.parent / target.split("#")[0]).exists(), target


@pytest.mark.slow
def test_the_docs_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "pgq worker" in cli and "--tasks" in cli, "the CLI reference is generated"
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "enqueue_many" in api, "the API reference comes from the docstrings"
