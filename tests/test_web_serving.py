"""The chat page as the daemon serves it: its files and headers, nothing from elsewhere, the vendored
scripts as their README names them, Ollama's root probe left intact, `serve --no-ui` and
LOCALRUN_UI=off, and `localrun open`. The page itself runs in a real browser in test_web_page.py."""

from __future__ import annotations

import fnmatch
import hashlib
import re
from pathlib import Path

import httpx
import pytest
from starlette.exceptions import HTTPException

from localrun.server.web import STATIC, asset_path
from tests.cli import run_cli
from tests.daemon import free_port, start_daemon

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

BROWSER_ACCEPT = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
ROOT = Path(__file__).resolve().parent.parent


def page_links() -> list[str]:
    """Every src and href the page's HTML names."""
    return re.findall(r'(?:src|href)="([^"]+)"', (STATIC / "index.html").read_text())


def test_a_browser_gets_the_page_with_a_strict_csp_and_other_clients_the_running_line(daemon):
    page = httpx.get(daemon.url + "/", headers=BROWSER_ACCEPT)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert "unsafe" not in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(daemon.url + "/").text == "localrun is running"  # Ollama clients' probe is unchanged
    assert httpx.head(daemon.url + "/").status_code == 200


def test_every_file_the_page_names_is_served_with_its_type(daemon):
    links = page_links()
    # nothing from a CDN; relative, so a reverse proxy may serve the daemon under a sub-path
    assert len(links) >= 6 and all(link.startswith("ui/") for link in links)
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for link in links:
        response = httpx.get(f"{daemon.url}/{link}")
        assert response.status_code == 200, link
        assert response.headers["content-type"].startswith(types[Path(link).suffix]), link


def test_the_page_has_no_inline_script_and_its_own_code_names_no_other_host():
    html = (STATIC / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\ssrc=)", html) == [] and re.findall(r"\son\w+\s*=", html) == []
    for script in STATIC.glob("*.js"):
        code = script.read_text()
        assert not re.search(r"https?://", code), script.name
        assert set(re.findall(r"from '([^']+)'", code)) <= {"./api.js", "./conversations.js", "./render.js"}


@pytest.mark.parametrize("name", ["../__init__.py", "../../config.py", "/etc/passwd", "vendor", "", "nope.js"])
def test_names_outside_the_static_files_are_not_found(name):
    with pytest.raises(HTTPException) as refused:
        asset_path(name)
    assert refused.value.status_code == 404


def test_traversal_over_http_is_not_found(daemon):
    for raw in ("/ui/../__init__.py", "/ui/%2e%2e/__init__.py", "/ui/..%2f..%2fconfig.py", "/ui/vendor"):
        with httpx.Client(base_url=daemon.url) as client:
            request = client.build_request("GET", "/")
            request.url = request.url.copy_with(raw_path=raw.encode())
            response = client.send(request)
        assert response.status_code == 404, raw
        assert "import" not in response.text


def test_vendored_scripts_are_the_ones_their_readme_names_with_licenses():
    vendor = STATIC / "vendor"
    readme = (vendor / "README.md").read_text()
    listed = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.M))
    assert sorted(listed) == sorted(p.name for p in vendor.glob("*.js"))
    for name, digest in listed.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    for license_file in re.findall(r"`([\w.]+LICENSE[\w.]*)`", readme):
        assert (vendor / license_file).stat().st_size > 500, license_file
    assert sum(p.stat().st_size for p in vendor.iterdir()) < 400_000  # modest: no framework, no build


def test_the_package_data_carries_every_static_file():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["localrun.server.web"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    shipped = [f for f in files if any(fnmatch.fnmatch(f, g) and f.count("/") == g.count("/") for g in globs)]
    assert files and shipped == files


@pytest.mark.parametrize("args, env", [(("--no-ui",), {}), ((), {"LOCALRUN_UI": "off"})])
def test_no_ui_serves_no_page_and_open_says_so(tmp_path, args, env):
    daemon = start_daemon(tmp_path, env, pull=False, args=args)
    try:
        assert httpx.get(daemon.url + "/", headers=BROWSER_ACCEPT).text == "localrun is running"
        assert httpx.get(daemon.url + "/ui/app.js").status_code == 404
        result = run_cli("open", "--print", "--host", f"127.0.0.1:{daemon.port}", timeout=60)
        assert result.returncode == 1 and "serves no chat page" in result.stderr and "Traceback" not in result.stderr
    finally:
        daemon.stop()


def test_a_ui_setting_that_is_neither_on_nor_off_is_refused(tmp_path):
    result = run_cli("serve", "--port", str(free_port()), env={"LOCALRUN_UI": "maybe"}, timeout=60)
    assert result.returncode == 2 and result.stderr.strip() == "error: LOCALRUN_UI must be on or off, got 'maybe'"


def test_open_starts_the_daemon_and_hands_the_url_to_the_browser(tmp_path):
    port = free_port()
    env = {"LOCALRUN_HOST": f"127.0.0.1:{port}", "LOCALRUN_API_KEY": "secret-key"}
    seen = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n')
    browser.chmod(0o755)
    try:
        printed = run_cli("open", "--print", env=env, timeout=90)  # nothing runs yet: open starts it
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.strip() == f"http://127.0.0.1:{port}/"
        opened = run_cli("open", env={**env, "BROWSER": str(browser)}, timeout=60)
        assert opened.returncode == 0, opened.stderr
        assert seen.read_text().strip() == f"http://127.0.0.1:{port}/"  # the key is never in the URL
        assert "secret-key" not in opened.stdout + printed.stdout
    finally:
        run_cli("stop", env=env, timeout=60)
