"""The command-line reference, generated from the click commands themselves: every command and
subcommand of `pgq` with its help exactly as `pgq ... --help` prints it.

Used as a MkDocs hook (mkdocs.yml `hooks:`): the marker `<!-- cli-reference -->` in
docs/reference/cli.md is replaced at build time, so the page cannot drift from the code.
Run directly, it prints the Markdown.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

MARKER = "<!-- cli-reference -->"
WIDTH = 100


def _commands(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Command, click.Context]]:
    yield command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def render() -> str:
    """Markdown: one section per command, its help as `--help` prints it."""
    from pgq_cli.cli import main

    root = click.Context(main, info_name="pgq", terminal_width=WIDTH, max_content_width=WIDTH)
    parts = []
    for command, ctx in _commands(main, root):
        path = ctx.command_path
        level = "#" * min(2 + path.count(" "), 4)
        parts.append(f"{level} `{path}`\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs hook: fill the marker of the CLI reference page."""
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
