"""A hostile tenant's look-alikes of every function and operator name pgq's SQL uses.

The names come from the SQL text itself (pgq_core/sql/*.sql and the bench's, the migrations,
and the SQL strings of pgq_core's modules), so a call added later is covered without editing
this file. For each name,
every pg_catalog overload whose argument types are ordinary gives look-alikes: each of its types
replaced by each of a set of common types (all its occurrences at once, so
`generate_series(timestamptz, timestamptz, interval)` gives `(date, date, interval)`), each
argument alone replaced (`||(text, text)` gives `(text, timestamptz)` and `(name, text)`), and
polymorphic ones (`anyelement`, `anycompatible`) of each arity. A look-alike identical to a
pg_catalog signature is left out (pg_catalog, searched first, would win anyway).

Every planted function records that it ran in two ways: `nextval` on a sequence per name
(sequences are not transactional, so a run inside a statement that then failed still shows)
and a row in `hostile_log` (which signature, when the statement committed).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any

from psycopg import sql

from pgq_core import queries

COMMON_TYPES = (
    "text", "name", '"char"', "smallint", "integer", "bigint", "numeric", "double precision",
    "date", "timestamp without time zone", "timestamp with time zone", "interval", "boolean",
    "jsonb", "text[]", "bigint[]", "oid", "regclass",
)
POLYMORPHIC = ("anyelement", "anycompatible")
_KEYWORDS = {
    "all", "any", "array", "as", "by", "cast", "coalesce", "exists", "filter", "from", "greatest",
    "in", "into", "least", "nullif", "on", "over", "rows", "select", "using", "values", "where",
    "within", "and", "or", "not", "key", "table", "trigger", "returns", "exception", "if",
}
_WORD_OPERATORS = {
    r"\bilike\b": ["~~*"], r"\blike\b": ["~~"], r"\bbetween\b": [">=", "<="],
    r"\bis\s+distinct\s+from\b": ["="], r"\bin\s*\(": ["="], r"\bcase\s+\S+\s+when\b": ["="],
}


def pgq_sql_texts() -> list[str]:
    """Every SQL text pgq runs: named statements, migrations, and SQL in pgq_core's modules."""
    core = files("pgq_core")
    texts = [core.joinpath("sql", name).read_text() for name in queries.FILES]
    texts.append(files("pgq_bench").joinpath("queries.sql").read_text())
    migrations = core.joinpath("migrations").iterdir()
    texts += [p.read_text() for p in migrations if p.name.endswith(".sql")]
    for path in Path(str(core)).rglob("*.py"):
        texts += _sql_strings(path.read_text())
    return texts


def _sql_strings(source: str) -> list[str]:
    """String constants handed to sql.SQL(...) or .execute(...), directly or by a module-level
    constant's name."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets if isinstance(target, ast.Name)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called not in {"SQL", "execute"}:
            continue
        for part in ast.walk(node.args[0]):
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                found.append(part.value)
            elif isinstance(part, ast.Name) and part.id in constants:
                found.append(constants[part.id])
    return found


def _code_only(text: str) -> str:
    text = re.sub(r"--[^\n]*", " ", text)
    text = re.sub(r"'(?:[^']|'')*'", " '' ", text)
    text = re.sub(r"%\(\w+\)s|%s|\{\w*\}", " $1 ", text)
    return text.replace("%%", "%").lower()


def used_names(texts: Iterable[str]) -> tuple[set[str], set[str]]:
    """(function names called unqualified, operator names) in the SQL texts."""
    functions: set[str] = set()
    operators: set[str] = set()
    for text in texts:
        code = _code_only(text)
        calls = r'(?:(?<![.\w"$])|(?<=pg_catalog\.))([a-z_][a-z0-9_]*)\s*\('
        for match in re.finditer(calls, code):
            if match.group(1) not in _KEYWORDS:
                functions.add(match.group(1))
        for token in re.findall(r"[-+*/<>=~!@#%^&|`?]+", code):
            if token not in {"=>"}:
                operators.add(token)
        for pattern, names in _WORD_OPERATORS.items():
            if re.search(pattern, code):
                operators.update(names)
    return functions, operators


_CATALOG_FUNCTIONS = """
SELECT p.proname, p.prokind, p.proretset,
       ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) t),
       format_type(p.prorettype, NULL), coalesce(p.proargnames, ARRAY[]::text[]),
       p.provariadic <> 0
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%s)
   AND p.prokind IN ('f', 'a')
"""
_CATALOG_OPERATORS = """
SELECT o.oprname, format_type(nullif(o.oprleft, 0), NULL), format_type(o.oprright, NULL),
       format_type(o.oprresult, NULL)
  FROM pg_catalog.pg_operator o
 WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY(%s)
"""
_PSEUDO = {"\"any\"", "internal", "cstring", "anyenum", "anyrange", "anymultirange",
           "anycompatiblerange", "anycompatiblemultirange", "record", "trigger"}


def _variants(types: tuple[str, ...], *, arity_polymorphic: bool = True) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for old in set(types):
        for new in COMMON_TYPES:
            out.add(tuple(new if t == old else t for t in types))
    for i in range(len(types)):
        for new in COMMON_TYPES:
            out.add((*types[:i], new, *types[i + 1 :]))
    if arity_polymorphic and types:
        for poly in POLYMORPHIC:
            out.add((poly,) * len(types))
    return out


def _concrete(types: tuple[str, ...]) -> bool:
    return not any(t.startswith("any") and t not in POLYMORPHIC for t in types) and not any(
        t in _PSEUDO for t in types
    )


def _returns(result: str, args: tuple[str, ...]) -> str:
    if result.startswith("any") or result in _PSEUDO or result == "void":
        return args[0] if args and result != "void" and args[0] in POLYMORPHIC else "text"
    return result


class Planter:
    """Plants the look-alikes as `role` in schema public of the connection's database."""

    def __init__(self, conn: Any, role: str):
        self.conn = conn
        self.role = role
        self.planted: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self._statements: list[str] = []

    def plant(self, functions: set[str], operators: set[str]) -> int:
        """Plants them all (in a few round trips); returns how many."""
        conn = self.conn
        self._statements = [
            "CREATE TABLE public.hostile_log (id bigserial, what text NOT NULL)",
            "GRANT INSERT, SELECT ON public.hostile_log TO PUBLIC",
            "GRANT USAGE ON SEQUENCE public.hostile_log_id_seq TO PUBLIC",
        ]
        rows = conn.execute(_CATALOG_FUNCTIONS, [sorted(functions)]).fetchall()
        catalog = {(r[0], tuple(r[3])) for r in rows}
        for name in sorted({r[0] for r in rows}):
            self._sequence(name)
        for name, kind, retset, args, result, argnames, variadic in rows:
            args = tuple(args)
            names = tuple(argnames) if len(argnames) == len(args) else ()
            for sig in sorted(_variants(args)):
                if (name, sig) in catalog or not _concrete(sig):
                    continue
                if kind == "a":
                    self._aggregate(name, sig, result)
                else:
                    self._function(name, sig, result, retset, names)
            if variadic:
                for count in range(1, 4):
                    for new in COMMON_TYPES:
                        sig = args[:-1] + (new,) * count
                        if (name, sig) not in catalog and _concrete(sig):
                            self._function(name, sig, result, retset)
            for argname in argnames:
                if argname and not variadic:
                    for new in COMMON_TYPES:
                        self._function(name, (new,), result, retset, (argname,))
        op_rows = conn.execute(_CATALOG_OPERATORS, [sorted(operators)]).fetchall()
        op_catalog = {(r[0], r[1], r[2]) for r in op_rows}
        for name in sorted({r[0] for r in op_rows}):
            self._sequence(f"op {name}")
        for name, left, right, result in op_rows:
            if not _concrete(tuple(t for t in (left, right) if t)) or not all(
                t in COMMON_TYPES or t.startswith("any") for t in (left, right) if t
            ):
                continue
            if left is None:
                sigs = {(None, new) for new in (*COMMON_TYPES, *POLYMORPHIC)}
            else:
                sigs = set(_variants((left, right)))  # type: ignore[arg-type]
            for lt, rt in sorted(sigs, key=str):
                if (name, lt, rt) not in op_catalog and _concrete(
                    tuple(t for t in (lt, rt) if t)
                ):
                    self._operator(name, lt, rt, result)
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(self.role)))
            for i in range(0, len(self._statements), 400):
                conn.execute(";\n".join(self._statements[i : i + 400]).encode())
        return len(self.planted)

    def _add(self, key: tuple[str, str, tuple[str, ...]], what: str, *statements: str) -> None:
        if key not in self.planted:
            self.planted[key] = what
            self._statements.extend(statements)

    def _sequence(self, name: str) -> None:
        seq = _ident(f"hostile {name}")
        self._statements.append(f"CREATE SEQUENCE public.{seq}")
        self._statements.append(f"GRANT USAGE ON SEQUENCE public.{seq} TO PUBLIC")

    @staticmethod
    def _body(seq_name: str, what: str, returns: str) -> str:
        ret = "RETURN" if returns.startswith("SETOF") else "RETURN NULL"
        seq = _literal("public." + _ident("hostile " + seq_name))
        body = (
            f"BEGIN PERFORM pg_catalog.nextval({seq}::regclass);"
            f" INSERT INTO public.hostile_log (what) VALUES ({_literal(what)}); {ret}; END"
        )
        return _literal(body)

    def _function(
        self,
        name: str,
        args: tuple[str, ...],
        result: str,
        retset: bool,
        argnames: tuple[str, ...] = (),
    ) -> None:
        returns = ("SETOF " if retset else "") + _returns(result, args)
        names = argnames if len(argnames) == len(args) else ("",) * len(args)
        params = ", ".join(f"{_ident(n)} {t}" if n else t for n, t in zip(names, args, strict=True))
        what = f"{name}({', '.join(args)})"
        self._add(
            ("f", name, args),
            what,
            f"CREATE FUNCTION public.{_ident(name)}({params}) RETURNS {returns} LANGUAGE plpgsql"
            f" SET search_path = pg_catalog AS {self._body(name, what, returns)}",
        )

    def _aggregate(self, name: str, args: tuple[str, ...], result: str) -> None:
        if len(args) != 1:
            return
        (arg,) = args
        returns = _returns(result, args)
        if returns in POLYMORPHIC:
            returns = "text"
        n = len(self.planted)
        what = f"aggregate {name}({arg})"
        self._add(
            ("f", name, args),
            what,
            f"CREATE FUNCTION public.hostile_step_{n}(int, {arg}) RETURNS int LANGUAGE sql"
            " AS 'SELECT 0'",
            f"CREATE FUNCTION public.hostile_final_{n}(int) RETURNS {returns} LANGUAGE plpgsql"
            f" SET search_path = pg_catalog AS {self._body(name, what, returns)}",
            f"CREATE AGGREGATE public.{_ident(name)}({arg}) (SFUNC = public.hostile_step_{n},"
            f" STYPE = int, INITCOND = '0', FINALFUNC = public.hostile_final_{n})",
        )

    def _operator(self, name: str, left: str | None, right: str, result: str) -> None:
        args = tuple(t for t in (left, right) if t)
        returns = _returns(result, args)
        n = len(self.planted)
        what = f"operator {name}({left or 'NONE'}, {right})"
        leftarg = f"LEFTARG = {left}, " if left else ""
        self._add(
            ("o", name, (left or "", right)),
            what,
            f"CREATE FUNCTION public.hostile_op_{n}({', '.join(args)}) RETURNS {returns}"
            f" LANGUAGE plpgsql SET search_path = pg_catalog"
            f" AS {self._body('op ' + name, what, returns)}",
            f"CREATE OPERATOR public.{name} ({leftarg}RIGHTARG = {right},"
            f" FUNCTION = public.hostile_op_{n})",
        )


def _ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def runs(conn: Any) -> tuple[list[str], list[str]]:
    """(names whose sequence moved, signatures logged): what of the planted objects ran."""
    conn.execute("SET search_path = pg_catalog")
    try:
        moved = [
            r[0]
            for r in conn.execute(
                "SELECT sequencename FROM pg_catalog.pg_sequences"
                " WHERE schemaname OPERATOR(pg_catalog.=) 'public'"
                "   AND sequencename OPERATOR(pg_catalog.~~) 'hostile %'"
                "   AND last_value IS NOT NULL ORDER BY 1"
            ).fetchall()
        ]
        logged = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT what FROM public.hostile_log ORDER BY 1"
            ).fetchall()
        ]
    finally:
        conn.execute("RESET search_path")
    return moved, logged
