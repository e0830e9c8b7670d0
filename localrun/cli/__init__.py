"""The `localrun` command line. See `app.py` for the error boundary and `commands.py` for the list."""

from localrun.cli.app import app, main

__all__ = ["app", "main"]
