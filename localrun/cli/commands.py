"""Importing this module registers every command on the app; one line per command module."""

from localrun.cli import store_commands  # noqa: F401  pull, list, show, rm, cp
from localrun.cli import daemon_commands  # noqa: F401  serve, stop, status, ps, logs
from localrun.cli import generate_commands  # noqa: F401  run, chat, batch
from localrun.cli import doctor_commands  # noqa: F401  doctor
from localrun.cli import launch_commands  # noqa: F401  launch claude
from localrun.cli import quantize_commands  # noqa: F401  quantize, perplexity
from localrun.cli import score_commands  # noqa: F401  score
from localrun.cli import web_commands  # noqa: F401  open
from localrun.cli import backend_commands  # noqa: F401  backend add, list, rm
from localrun.cli import worker_commands  # noqa: F401  worker
from localrun.cli import help_command  # noqa: F401  help (registered last: listed last)
