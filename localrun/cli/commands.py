"""Importing this module registers every command on the app; one line per command module."""

from localrun.cli import store_commands  # noqa: F401  pull, list, show, rm, cp
