"""`localrun open`: the daemon's web chat page in a browser, with the daemon started when needed.

The URL never carries the API key: with LOCALRUN_API_KEY set the page asks for it once and keeps it
in the browser's storage.
"""

from __future__ import annotations

from typing import Optional

import typer

from localrun.cli.app import app
from localrun.cli.daemon_commands import HOST_HELP


@app.command("open")
def open_page(
    host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP),
    print_only: bool = typer.Option(False, "--print", help="Print the page's URL instead of opening a browser."),
) -> None:
    """Open the web chat page in the default browser (the BROWSER variable picks another one)."""
    import webbrowser

    from localrun.cli import daemon
    from localrun.cli.daemon_commands import target
    from localrun.client import Client
    from localrun.errors import LocalrunError

    address = target(host)
    daemon.ensure_running(address)
    url = address.base_url + "/"
    with Client(address.base_url) as client:
        if not client.serves_web_page():
            raise LocalrunError(f"{url} serves no chat page (the daemon runs with --no-ui or LOCALRUN_UI=off)")
    if print_only:
        print(url)
        return
    if not webbrowser.open(url):
        raise LocalrunError(f"no browser could open {url}; open it yourself, or name one in BROWSER")
    print(f"opened {url}")
