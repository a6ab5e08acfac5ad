"""The option tables of the command-line reference, generated from the click commands.

Used as a MkDocs hook (mkdocs.yml `hooks:`): in docs/reference/cli.md each marker
`<!-- cli-options: PATH -->` (PATH a command path such as `worker` or `schedule add`, empty for
`pgq` itself) becomes that command's usage line and a table of its options, as `pgq PATH
--help` prints them, so the page cannot drift from the code. The prose and the examples around
them are written by hand. Run directly with a PATH, it prints that Markdown.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click

MARKER = re.compile(r"<!-- cli-options:\s*([\w -]*?)\s*-->")


def _command(path: str) -> tuple[click.Command, click.Context]:
    from pgq_cli.cli import main

    ctx = click.Context(main, info_name="pgq")
    command: click.Command = main
    for name in path.split():
        if not isinstance(command, click.Group):
            raise ValueError(f"pgq {path}: {ctx.command_path} has no subcommands")
        sub = command.get_command(ctx, name)
        if sub is None:
            raise ValueError(f"pgq {path}: no such command")
        command = sub
        ctx = click.Context(sub, info_name=name, parent=ctx)
    return command, ctx


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(path: str) -> str:
    """Markdown: the usage line and one table row per option of `pgq PATH`."""
    command, ctx = _command(path)
    usage = " ".join(command.collect_usage_pieces(ctx))
    rows = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or "--help" in param.opts:
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        opts, help_text = record
        rows.append(f"| `{_cell(opts)}` | {_cell(help_text)} |")
    out = [f"`{ctx.command_path} {usage}`"]
    if rows:
        out += ["", "| option | what it does |", "| --- | --- |", *rows]
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs hook: fill the markers of the CLI reference page."""
    return MARKER.sub(lambda m: render(m.group(1)), markdown)


if __name__ == "__main__":
    print(render(" ".join(sys.argv[1:])))
