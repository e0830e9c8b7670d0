"""Typed HTTP client for the daemon (httpx): the only way the CLI reaches it.

    Client(base_url, api_key)      health, version, ps, models, show, tags, pull, delete, copy,
                                   unload, chat, complete
    Client.from_host(host)         base URL from --host / LOCALRUN_HOST, key from LOCALRUN_API_KEY
    TextStream                     a streamed answer: text deltas, then `.completion`

`tags()` and `show()` answer in localrun.api_types' ListedModel and ShowResponse, the types the
server writes; `pull()` yields its PullProgress (here named PullStatus).
"""

from localrun.client.address import Address, parse_address
from localrun.client.client import Client, TextStream
from localrun.client.types import Completion, GenerateOptions, PullStatus, RunningModel, Timings, Usage

__all__ = ["Address", "Client", "Completion", "GenerateOptions", "PullStatus", "RunningModel", "TextStream",
           "Timings", "Usage", "parse_address"]
