"""Write docs/cli.md, the command reference, from the commands' own `--help` (the text users see).

    python scripts/cli_reference.py           rewrite docs/cli.md
    python scripts/cli_reference.py --check   exit 1 when docs/cli.md is out of date (what the test does)

The help is rendered at a fixed width, so the file does not depend on the terminal it was made in.
"""

from __future__ import annotations

import sys
from pathlib import Path

PATH = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = 100
HEAD = """# localrun command reference

Every command's `--help`, as `localrun COMMAND --help` (or `localrun help COMMAND`) prints it. Written by
`python scripts/cli_reference.py` from the commands themselves; `tests/test_cli_reference.py` fails when
it is out of date. `localrun ls` is `localrun list`.
"""


def reference() -> str:
    """The whole reference: the root's help, then each command's (and each group's commands') in order."""
    from typer.main import get_command

    from localrun.cli import app, commands  # noqa: F401  (registers every command)
    from localrun.cli.help import render_help, subcommands

    sections: list[str] = [HEAD]

    def add(command, path: list[str]) -> None:
        text = render_help(command, path, WIDTH).rstrip()
        sections.append(f"## {' '.join(path)}\n\n```text\n{text}\n```\n")
        for name, sub in subcommands(command):
            add(sub, [*path, name])

    add(get_command(app), ["localrun"])
    return "\n".join(sections)


def main(argv: list[str]) -> int:
    text = reference()
    if "--check" in argv:
        if not PATH.exists() or PATH.read_text(encoding="utf-8") != text:
            sys.stderr.write(f"{PATH} is out of date: run python scripts/cli_reference.py\n")
            return 1
        return 0
    PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
