"""pgq_core stands alone, and every statement it runs lives in pgq_core/sql/*.sql."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pgq_core import queries

ROOT = Path(__file__).resolve().parents[1]


def test_importing_pgq_core_loads_no_tui_or_textual() -> None:
    code = (
        "import sys, pgq_core, pgq_core.queue, pgq_core.migrate;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'pgq_tui', 'pgq_cli')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_import_linter_contract_holds() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed")
    done = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KEPT" in done.stdout


def test_every_op_names_a_statement_in_queries_sql() -> None:
    trees = [ast.parse(path.read_text()) for path in (ROOT / "pgq_core" / "ops").glob("*.py")]
    used = {
        node.args[0].value
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Op"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert used, "found no Op(...) calls"
    assert used <= set(queries.names())
    # the grants of `pgq roles` are DDL over roles.sql's sections, which roles.py names
    roles = ast.parse((ROOT / "pgq_core" / "roles.py").read_text())
    used |= {
        node.value
        for node in ast.walk(roles)
        if isinstance(node, ast.Constant) and node.value in set(queries.names())
    }
    assert set(queries.names()) - used == set(), "pgq_core/sql has statements nothing runs"


def test_no_sql_outside_the_sql_home_in_pgq_core() -> None:
    allowed = {"queries.py", "migrate.py", "fenced.py"}
    for path in (ROOT / "pgq_core").rglob("*.py"):
        if path.name in allowed:
            continue
        text = path.read_text()
        for keyword in ("UPDATE {", "INSERT INTO", "DELETE FROM", "SELECT id"):
            assert keyword not in text, (
                f"{path.name} holds SQL ({keyword!r}); put it in pgq_core/sql"
            )


def test_the_command_line_loads_the_bench_only_for_pgq_bench() -> None:
    """`pgq_bench` is imported inside the `bench` command: not by `pgq_cli.cli`, nor its help."""
    code = (
        "import sys, pgq_cli.cli;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'pgq_bench'];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    code = (
        "import sys\n"
        "from pgq_cli.cli import main\n"
        "try:\n"
        "    main(['bench', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'pgq_bench']\n"
        "print(bad, file=sys.stderr); sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--same-resources" in done.stdout


def test_pgq_bench_exports_resolve() -> None:
    import pgq_bench

    for name in pgq_bench.__all__:
        assert getattr(pgq_bench, name) is not None, name


def test_benchmark_scripts_use_only_the_bench_public_api() -> None:
    """`benchmarks/*.py` import `pgq_bench` names from the package, never from its modules,
    and only names it exports."""
    import pgq_bench

    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert scripts
    for script in scripts:
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("pgq_bench."), (script.name, node.module)
                if node.module == "pgq_bench":
                    for alias in node.names:
                        assert alias.name in pgq_bench.__all__, (script.name, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("pgq_bench."), (script.name, alias.name)


def test_the_benchmarks_index_names_every_script_and_only_result_files_that_exist() -> None:
    """benchmarks/README.md is a short index: every script in benchmarks/ has its line, and
    every results file it names is in benchmarks/results."""
    index = (ROOT / "benchmarks" / "README.md").read_text()
    assert len(index.splitlines()) <= 150
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        assert f"`{script.name}`" in index, script.name
    named = re.findall(r"`([\w.-]+\.(?:json|jsonl|png))`", index)
    assert len(named) >= 20
    missing = [n for n in named if not (ROOT / "benchmarks" / "results" / n).is_file()]
    assert not missing, missing


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in tests/conftest.py and tests/support.py, never in a test_*.py
    that another test module imports (that runs the other module's import-time side effects and
    hides which helpers are shared)."""
    tests = ROOT / "tests"
    test_modules = {path.stem for path in tests.glob("test_*.py")}
    found = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                module = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
                if module in test_modules:
                    found.append(f"{path.name} imports {name}")
    assert found == []


def test_the_pgq_group_is_its_options_and_a_table_of_commands() -> None:
    """Every `pgq` command lives in its family's module and is imported when run: at start-up
    the group holds none of its own (it held 15, three of them wrappers installed over the
    plain ones from the bottom of cli.py)."""
    code = (
        "from pgq_cli.cli import LazyGroup, main\n"
        "print(sorted(main.commands), sorted(LazyGroup.LAZY) == main.list_commands(None))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["[]", "True"]


#: What protocol.sql is for, by role (what producers and workers run): every statement in it
#: is one of these, and each of these is in it. A producer's other paths (one job, COPY, a
#: key's holder) are enqueue.sql's.
PROTOCOL = {
    "enqueue": {"enqueue"},
    "claim": {"claim"},
    "settle": {"settle_complete_and_claim", "settle_fail", "settle_snooze", "record_stale"},
    "extend": {"extend_leases"},
    "hand back": {"hand_back", "hand_back_orphans", "hand_back_failed_over"},
    "reap": {"reap"},
}
#: The public batch API (api.sql) by statement, and the worker's statement it waits where.
TWINS = {
    "complete": "settle_complete_and_claim",
    "fail": "settle_fail",
    "heartbeat": "extend_leases",
    "release": "hand_back",
}
#: one page: the lines protocol.sql may hold (why each statement is written as it is lives in
#: docs/guides/protocol.md, not here)
PAGE = 255


def _sql(name: str) -> tuple[dict[str, str], dict[str, str]]:
    return queries.sections((ROOT / "pgq_core" / "sql" / name).read_text())


def _named(body: str, fragments: dict[str, str]) -> set[str]:
    return {name for name in fragments if "{" + name + "}" in body}


def test_the_protocol_is_one_page_of_what_producers_and_workers_run() -> None:
    """protocol.sql holds the statements of enqueue, claim, settle, extend, hand back and reap,
    and nothing else, on one page."""
    statements, _ = _sql("protocol.sql")
    assert set(statements) == set().union(*PROTOCOL.values())
    assert len(statements) == sum(len(names) for names in PROTOCOL.values()) == 11
    text = (ROOT / "pgq_core" / "sql" / "protocol.sql").read_text()
    assert len(text.splitlines()) <= PAGE
    # every statement writes its history rows through one column list (`into_history`)
    assert text.count("INSERT INTO {schema}.job_events") == 1
    # each statement states its invariant in one comment line; the reasons are in the docs
    heads = re.findall(r"^-- name: (\w+)\n((?:--.*\n)*)", text, re.MULTILINE)
    assert {name: comment.count("\n") for name, comment in heads} == dict.fromkeys(statements, 1)


def test_the_public_api_is_built_from_its_worker_twins_fragments() -> None:
    """Each statement of api.sql writes its rows with the fragments its worker twin writes
    them with, and differs in how it locks: it waits (`wait_held`, its only own fragment)
    where the twin skips (`lock_held`)."""
    api, api_fragments = _sql("api.sql")
    worker, fragments = _sql("protocol.sql")
    assert set(api) == set(TWINS)
    assert set(api_fragments) == {"wait_held"}
    for name, twin in TWINS.items():
        waits = _named(api[name], fragments | api_fragments)
        skips = _named(worker[twin], fragments)
        assert "wait_held" in waits and "lock_held" not in waits, name
        assert "lock_held" in skips and "wait_held" not in skips, twin
        writes = waits - {"wait_held", "held_pairs"}
        assert writes and writes <= skips, (name, writes, skips)


def test_dead_or_retry_and_kill_are_each_written_once() -> None:
    """The fail statements decide dead or retry by one fragment (the decision written once);
    `kill` and `kill_filtered` differ only in how they choose their victims."""
    texts = "\n".join((ROOT / "pgq_core" / "sql" / name).read_text() for name in queries.FILES)
    statements, fragments = queries.sections(texts)
    assert texts.count("j.attempts >= j.max_attempts OR") == 1
    for name in ("fail", "settle_fail"):
        assert "dead_or_retry" in _named(statements[name], fragments)
        assert "max_attempts" not in statements[name], name
    for name in ("kill", "kill_filtered"):
        assert "kill_victims" in _named(statements[name], fragments)
        body = statements[name]
        assert "UPDATE {schema}" not in body and "INSERT INTO" not in body, name


def test_each_fragment_is_used_and_spliced() -> None:
    """A fragment is written once and named by a statement or by a fragment that is (else it
    is dead text); no statement keeps a fragment's name after splicing."""
    text = "\n".join((ROOT / "pgq_core" / "sql" / name).read_text() for name in queries.FILES)
    statements, fragments = queries.sections(text)
    assert fragments, "no fragments found"
    used = set().union(*(_named(body, fragments) for body in statements.values()))
    while True:
        more = used | set().union(*(_named(fragments[name], fragments) for name in used))
        if more == used:
            break
        used = more
    assert used == set(fragments), set(fragments) - used
    for body in queries._raw().values():
        assert not any("{" + name + "}" in body for name in fragments)


def _contract(name_start: str) -> dict[str, Any]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found = [c for c in contracts["contracts"] if str(c["name"]).startswith(name_start)]
    assert len(found) == 1, name_start
    contract: dict[str, Any] = found[0]
    return contract


def test_the_contracts_name_every_worker_part_and_command_family() -> None:
    """A new worker part or command family is covered by its import contract and named in the
    worker's index: the lists are checked against the files, not kept by memory. `runtime`
    composes the parts, and `signals` runs a `Worker` above it."""
    parts = {p.stem for p in (ROOT / "pgq_core" / "worker").glob("*.py")} - {"__init__"}
    listed = _contract("the worker's parts never import the runtime")["source_modules"]
    assert {m.rsplit(".", 1)[1] for m in listed} == parts - {"runtime", "signals"}
    index = (ROOT / "pgq_core" / "worker" / "__init__.py").read_text()
    assert [p for p in sorted(parts) if f"`{p}`" not in index] == []
    families = {f"pgq_cli.{p.stem}" for p in (ROOT / "pgq_cli").glob("*_cli.py")}
    lazily = _contract("the pgq group loads its commands lazily")["forbidden_modules"]
    standing = _contract("command families stand on")["source_modules"]
    assert families - set(lazily) == set()
    assert families - set(standing) == set()


def test_the_ops_package_lists_every_module_and_each_stays_short() -> None:
    """Each module of pgq_core/ops is in the layers contract and the package's index, and no
    module of it (nor the tunables) is over 400 lines: a new audience gets a module of its own,
    not the bottom of another."""
    home = ROOT / "pgq_core" / "ops"
    modules = {p.stem for p in home.glob("*.py")} - {"__init__"}
    layered = {
        name.strip()
        for layer in _contract("ops by audience")["layers"]
        for name in str(layer).split("|")
    }
    assert layered == modules
    index = (home / "__init__.py").read_text()
    assert [m for m in sorted(modules) if f"`{m}`" not in index] == []
    sizes = {p.name: len(p.read_text().splitlines()) for p in home.glob("*.py")}
    sizes["defaults.py"] = len((ROOT / "pgq_core" / "defaults.py").read_text().splitlines())
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_every_ops_name_is_still_offered_by_the_package() -> None:
    """`from pgq_core import ops; ops.claim(...)` keeps working: every public name of an ops
    module is re-exported by the package, and each resolves to the module's own object."""
    import importlib

    from pgq_core import ops

    for path in sorted((ROOT / "pgq_core" / "ops").glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"pgq_core.ops.{path.stem}")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                name = node.name
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
            else:
                continue
            if name.startswith("_") or name == "T":
                continue
            assert getattr(ops, name, None) is getattr(module, name), f"ops.{name}"
