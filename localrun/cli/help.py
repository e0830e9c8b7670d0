"""How parameters read in `--help` and in usage errors: click's words, not Python's types.

Typer (from about 0.2x) prints the Python type of every parameter (`<str>`, `<list[str]>`, and `<bool>`
beside flags, which then read as if they took a value) and wraps required arguments in braces
(`{model}`). localrun's help uses the conventions of click, Ollama and most Unix tools instead:
arguments in capitals (`MODEL [PROMPT]...`), a value's kind after an option (`--max-tokens INTEGER`),
nothing after a flag. `use_plain_names()` installs that on Typer's parameter classes once; on a Typer
that has no such hooks (older releases already print click's words) it changes nothing.
"""

from __future__ import annotations

from typing import Any

# A value's kind by its Python annotation, in click's words.
_KINDS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "Path": "PATH", "list[str]": "TEXT"}


def _argument_name(param: Any) -> str:
    return param.metavar or param.name.upper()


def _argument_usage(param: Any) -> str:
    name = _argument_name(param) if param.required else f"[{_argument_name(param)}]"
    return name + ("..." if param.nargs != 1 else "")


def _option_kind(param: Any, ctx: Any = None) -> str | None:
    if param.is_flag or param.count:
        return None
    if param.metavar is not None:
        return param.metavar
    bare = param.bare_type()
    return _KINDS.get(bare, bare.upper())


def use_plain_names() -> None:
    """Patch Typer's parameter display where it has the hooks (see the module docstring)."""
    from typer import core

    argument, option = getattr(core, "TyperArgument", None), getattr(core, "TyperOption", None)
    if argument is None or option is None or not hasattr(argument, "_usage_display_name"):
        return
    if not hasattr(argument, "bare_type") or not hasattr(option, "display_type_rich"):
        return
    argument.display_name_raw = property(_argument_name)
    argument._usage_display_name = _argument_usage
    argument.display_type_rich = lambda self, ctx: None
    option.display_type_rich = _option_kind


def render_help(command: Any, path: list[str], width: int | None = None) -> str:
    """The `--help` text of `command`, reached as `path` (["localrun", "launch", "claude"]); `width` fixes
    the wrapping (the generated reference), else the terminal's."""
    import typer

    ctx = typer.Context(command, info_name=" ".join(path), help_option_names=["-h", "--help"],
                        terminal_width=width, max_content_width=width)
    return command.get_help(ctx)


def subcommands(command: Any) -> list[tuple[str, Any]]:
    """A group's visible commands in the order `--help` lists them; [] for a command."""
    import typer

    if not hasattr(command, "list_commands"):
        return []
    ctx = typer.Context(command)
    found = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
    return [(name, sub) for name, sub in found if sub is not None and not sub.hidden]


__all__ = ["render_help", "subcommands", "use_plain_names"]
