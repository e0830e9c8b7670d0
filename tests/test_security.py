"""Access control and request limits (server/security.py): the pure decisions table-tested, then a
real daemon started with API keys, extra origins and small limits, probed over loopback HTTP."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from localrun.config import Settings
from localrun.errors import UsageError
from localrun.server.body import MAX_JSON_VALUES, parse, structure
from localrun.server.security import (Limits, OriginGuard, check_bind, is_loopback, key_matches, origin_pattern,
                                      presented_key, same_origin, split_host)
from tests.cli import run_cli
from tests.daemon import free_port, start_daemon

KEYS = ("k-one", "k-two")
EXTRA_ORIGIN = "https://app.example.com"


# --- pure decisions --------------------------------------------------------------------------


@pytest.mark.parametrize("value, host", [
    ("localhost:11435", "localhost"), ("LOCALHOST", "localhost"), ("127.0.0.1", "127.0.0.1"),
    ("[::1]:8080", "::1"), ("[::1]", "::1"), ("::1", "::1"), ("evil.com:80", "evil.com"),
    ("http://10.0.0.2:8000", "10.0.0.2"), ("0.0.0.0:11435", "0.0.0.0"), (" 127.0.0.1:80 ", "127.0.0.1"),
    # RFC 3986: what is not `host [":" port]` has no host, so it is never taken for loopback
    ("[::1].evil.com", ""), ("[::1]evil", ""), ("127.0.0.1:80@evil.com", ""), ("localhost:80:80", ""),
    ("[::1]:80:80", ""), ("[127.0.0.1]", ""), ("[::1", ""), ("::1]", ""), ("local host", ""),
    ("127.0.0.1:80/x", ""), ("127.0.0.1:-1", ""), ("http://[::1].evil.com/", ""), ("user@localhost", ""),
    ("127.0.0.1.nip.io", "127.0.0.1.nip.io"), ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
])
def test_split_host(value, host):
    assert split_host(value) == host


@pytest.mark.parametrize("host, loopback", [
    ("localhost", True), ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.2", False), ("localhost.evil.com", False),
    ("127.0.0.1.nip.io", False), ("evil.com", False), ("", False), ("128.0.0.1", False),
    ("::ffff:127.0.0.1", False), ("127.1", False), ("0x7f.0.0.1", False), ("localhost.", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("origin, allowed", [
    ("http://localhost", True), ("http://localhost:3000", True), ("https://127.0.0.1:8443", True),
    ("http://[::1]:5173", True), (EXTRA_ORIGIN, True), ("chrome-extension://abc", True),
    ("http://evil.com", False), ("http://localhost.evil.com", False), ("null", False),
    ("https://app.example.com.evil.com", False), ("file://", False), ("http://127.0.0.1.evil.com", False),
])
def test_origin_pattern(origin, allowed):
    pattern = re.compile(origin_pattern((EXTRA_ORIGIN + "/", "chrome-extension://*")))
    assert bool(pattern.fullmatch(origin)) is allowed


@pytest.mark.parametrize("origin, host, same", [
    ("http://192.168.1.5:11435", "192.168.1.5:11435", True), ("http://[fd00::5]:80", "[fd00::5]:80", True),
    ("http://192.168.1.5:11435", "192.168.1.5:8080", False), ("http://192.168.1.6:11435", "192.168.1.5:11435", False),
    ("http://myserver.lan:11435", "myserver.lan:11435", False),  # a name: DNS rebinding could stand behind it
    ("http://evil.com", "192.168.1.5", False), ("null", "192.168.1.5", False), ("http://192.168.1.5", "", False),
])
def test_same_origin_is_trusted_for_ip_addresses_only(origin, host, same):
    assert same_origin(origin, host) is same


def test_a_page_served_at_a_lan_address_may_call_back_but_others_may_not():
    guard = OriginGuard(None, loopback_bind=False, origins=re.compile(origin_pattern(())))
    lan = {b"host": b"10.0.0.2:11435"}
    assert guard.refusal({**lan, b"origin": b"http://10.0.0.2:11435"}) is None
    assert "not allowed" in guard.refusal({**lan, b"origin": b"http://10.0.0.3:11435"})
    assert "not allowed" in guard.refusal({b"host": b"box.lan:11435", b"origin": b"http://box.lan:11435"})


def test_keys_are_matched_exactly_from_either_header():
    assert key_matches("k-two", KEYS) and key_matches("k-one", KEYS)
    for wrong in ("", "k-", "k-one ", "K-ONE", "k-onek-two", "k-one,k-two"):
        assert not key_matches(wrong, KEYS)
    assert presented_key({b"authorization": b"Bearer  k-one "}) == "k-one"
    assert presented_key({b"authorization": b"bearer k-one"}) == "k-one"
    assert presented_key({b"x-api-key": b"k-two"}) == "k-two"
    assert presented_key({b"authorization": b"Basic azE6eA=="}) == ""


@pytest.mark.parametrize("body, refusal", [
    (b'{"a": [{"b": [1, 2]}], "c": {}}', None), (b'{"a": "[[[[[[' + b"[" * 100 + b'"}', None),
    (b"[" * 64 + b"]" * 64, None), (b"[" * 65 + b"]" * 65, "nested more than 64"),
    (b"[" * 5000 + b"]" * 5000, "nested more than 64"),
    (b'{"a": "\\\\ud800"}', None), (b'{"a": "\\ud83d\\ude00"}', None),  # an escaped backslash; a valid pair
    (b'{"messages": [{"content": "x\\ud800"}]}', "messages[0].content: text contains an unpaired surrogate"),
    (b'{"stop": ["\\udfff"]}', "stop[0]: text contains an unpaired surrogate"),
    (b'{"\\ud800": 1}', "unpaired surrogate"), (b'{"prompt": "a\\u0000b"}', "prompt: text must not contain NUL"),
    (b'{"a": ', "invalid JSON body"),
])
def test_bodies_are_parsed_once_and_checked(body, refusal):
    parsed = parse(body, structure(body))
    assert parsed.refusal == refusal if refusal is None else refusal in parsed.refusal
    assert parsed.ok is (refusal is None)


def test_a_body_of_a_million_values_is_refused_before_it_is_parsed():
    hostile = b'{"x": [' + b",".join([b"[]"] * (MAX_JSON_VALUES // 2 + 1)) + b"]}"
    assert "more than" in parse(hostile, structure(hostile)).refusal
    # the same brackets inside a string (a prompt full of code) are text, not values
    text = b'{"prompt": "' + b"[]," * MAX_JSON_VALUES + b'"}'
    assert parse(text, structure(text)).ok


def test_limits_check_every_dialect_field():
    limits = Limits(max_body=1000, max_messages=2, max_tokens=100, max_inputs=3)
    assert limits.check({"messages": [{}, {}], "max_tokens": 100, "input": ["a"] * 3}) is None
    assert "LOCALRUN_MAX_MESSAGES" in limits.check({"messages": [{}] * 3})
    assert "LOCALRUN_MAX_INPUTS" in limits.check({"input": ["a"] * 4})
    assert "LOCALRUN_MAX_INPUTS" in limits.check({"n": 4})
    for body in ({"max_tokens": 101}, {"max_completion_tokens": 1e9}, {"options": {"num_predict": 101}}):
        assert "LOCALRUN_MAX_TOKENS" in limits.check(body)
    assert limits.check(["not", "an", "object"]) is None


def test_check_bind_needs_a_key_or_insecure_off_loopback():
    config = Settings.from_env()
    for host in ("127.0.0.1", "localhost", "::1"):
        check_bind(host, config, insecure=False)
    with pytest.raises(UsageError, match="--insecure"):
        check_bind("0.0.0.0", config, insecure=False)
    check_bind("0.0.0.0", config, insecure=True)
    from dataclasses import replace

    check_bind("0.0.0.0", replace(config, api_keys=("k",)), insecure=False)


# --- a real daemon with keys ------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("keyed-home"), {
        "LOCALRUN_API_KEY": ",".join(KEYS), "LOCALRUN_ORIGINS": EXTRA_ORIGIN, "LOCALRUN_MAX_BODY": "64KiB",
        "LOCALRUN_MAX_MESSAGES": "4", "LOCALRUN_MAX_TOKENS": "1000", "LOCALRUN_MAX_INPUTS": "8",
    })
    yield d
    d.stop()


@pytest.fixture(scope="module")
def http(keyed):
    with httpx.Client(base_url=keyed.url, timeout=30) as client:
        yield client


AUTH = {"Authorization": f"Bearer {KEYS[1]}"}


def _dialect_error(path: str, response: httpx.Response, status: int, kind: str) -> str:
    """The message of an error answer, after checking it has the status and its dialect's shape."""
    assert response.status_code == status, (path, response.status_code, response.text)
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == kind
        return body["error"]["message"]
    if path.startswith("/v1/"):
        assert body["error"]["type"] == kind and body["error"]["code"] in (None, "invalid_api_key",
                                                                             "request_too_large")
        return body["error"]["message"]
    assert isinstance(body["error"], str)
    return body["error"]


def test_health_needs_no_key(http):
    assert http.get("/health").json()["status"] == "ok"


def test_every_route_but_health_and_the_root_needs_a_key(http):
    schema = http.get("/openapi.json", headers=AUTH).json()
    routes = [(method.upper(), path) for path, ops in schema["paths"].items() for method in ops]
    assert len(routes) >= 10
    for method, template in routes:
        path = re.sub(r"\{[^}]+\}", "x", template)
        response = http.request(method, path, json={"model": "smollm2"})
        if path in ("/health", "/"):  # the root: Ollama's "is running" probe, or the chat page that asks for the key
            assert response.status_code == 200
            continue
        if method == "HEAD":  # no body to read
            assert response.status_code == 401
            continue
        message = _dialect_error(path, response, 401, "authentication_error")
        assert "API key" in message and response.headers["www-authenticate"] == "Bearer"
    assert http.get("/openapi.json").status_code == 401


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer k-one"}, {"authorization": "bearer k-two"}, {"x-api-key": "k-one"},
])
def test_each_key_works_in_either_header(http, headers):
    assert http.get("/v1/models", headers=headers).status_code == 200


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer k-three"}, {"x-api-key": "k-one,k-two"}, {"Authorization": "k-one"},
    {"Authorization": "Basic k-one"},
])
def test_wrong_or_missing_keys_get_401_in_each_dialect(http, headers):
    for path in ("/v1/models", "/v1/messages", "/api/tags"):
        method = "POST" if path == "/v1/messages" else "GET"
        response = http.request(method, path, headers=headers)
        kind = "authentication_error"
        _dialect_error(path, response, 401, kind)


@pytest.mark.parametrize("host, status", [
    ("localhost", 200), ("LOCALHOST:{port}", 200), ("127.0.0.1:{port}", 200), ("127.1.2.3", 200),
    ("[::1]:{port}", 200), ("evil.example", 403), ("evil.example:{port}", 403),
    ("localhost.evil.example", 403), ("127.0.0.1.nip.io:{port}", 403), ("192.168.1.10", 403),
    ("[::1].evil.example", 403), ("[::1]evil", 403), ("127.0.0.1:{port}@evil.example", 403),
])
def test_host_header_must_be_loopback(keyed, http, host, status):
    response = http.get("/api/tags", headers={**AUTH, "Host": host.format(port=keyed.port)})
    assert response.status_code == status, response.text
    if status == 403:
        assert "DNS rebinding" in response.json()["error"]


def test_dns_rebinding_is_refused_before_the_key_check(http):
    response = http.get("/v1/models", headers={"Host": "attacker.example"})
    assert "loopback" in _dialect_error("/v1/models", response, 403, "permission_error")


def test_cors_allows_loopback_and_listed_origins_only(http):
    for origin in ("http://localhost:3000", "http://127.0.0.1:5173", EXTRA_ORIGIN):
        response = http.get("/api/tags", headers={**AUTH, "Origin": origin})
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == origin
    response = http.get("/api/tags", headers={**AUTH, "Origin": "http://evil.example"})
    assert response.status_code == 403 and "LOCALRUN_ORIGINS" in response.json()["error"]
    assert "access-control-allow-origin" not in response.headers


def test_preflight_is_answered_without_a_key(http):
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    response = http.options("/v1/chat/completions", headers={"Origin": EXTRA_ORIGIN, **preflight})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == EXTRA_ORIGIN
    assert "authorization" in response.headers["access-control-allow-headers"].lower()
    assert "POST" in response.headers["access-control-allow-methods"]
    refused = http.options("/v1/chat/completions", headers={"Origin": "http://evil.example", **preflight})
    assert refused.status_code == 403


def test_a_browser_post_from_a_foreign_page_is_refused(http):
    """A form-like POST (text/plain: no preflight) from another site must not reach a route."""
    response = http.post("/api/delete", content='{"model":"smollm2"}',
                         headers={**AUTH, "Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert response.status_code == 403
    assert any(m["name"].startswith("smollm2") for m in http.get("/api/tags", headers=AUTH).json()["models"])


@pytest.mark.parametrize("path, kind", [
    ("/v1/chat/completions", "invalid_request_error"), ("/v1/messages", "request_too_large"), ("/api/chat", ""),
])
def test_oversized_bodies_get_413(http, path, kind):
    big = b'{"model": "smollm2", "prompt": "' + b"a" * 70_000 + b'"}'
    response = http.post(path, content=big, headers={**AUTH, "Content-Type": "application/json"})
    message = _dialect_error(path, response, 413, kind) if kind else response.json()["error"]
    assert response.status_code == 413 and "LOCALRUN_MAX_BODY" in message


def test_oversized_chunked_body_without_length_gets_413(http):
    def chunks():
        for _ in range(20):
            yield b"a" * 8192

    response = http.post("/api/generate", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/embeddings"])
def test_deep_json_gets_400_not_500(http, path):
    body = '{"model": "smollm2", "messages": ' + "[" * 3000 + "]" * 3000 + "}"
    response = http.post(path, content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert "nested" in response.text


@pytest.mark.parametrize("path, body, setting", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}] * 5}, "LOCALRUN_MAX_MESSAGES"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}] * 5}, "LOCALRUN_MAX_MESSAGES"),
    ("/v1/messages", {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}] * 5}, "LOCALRUN_MAX_MESSAGES"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1001}, "LOCALRUN_MAX_TOKENS"),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**12}, "LOCALRUN_MAX_TOKENS"),
    ("/api/generate", {"prompt": "hi", "options": {"num_predict": 5000}}, "LOCALRUN_MAX_TOKENS"),
    ("/v1/embeddings", {"input": ["a"] * 9}, "LOCALRUN_MAX_INPUTS"),
    ("/api/embed", {"input": ["a"] * 9}, "LOCALRUN_MAX_INPUTS"),
])
def test_count_limits_get_400_in_the_dialect(http, path, body, setting):
    response = http.post(path, json={"model": "smollm2", **body}, headers=AUTH)
    message = _dialect_error(path, response, 400, "invalid_request_error")
    assert setting in message


@pytest.mark.parametrize("name, status", [
    ("smollm2\x00", 400), ("a\x00/../../etc/passwd", 400), ("..", 400), ("../../etc/passwd:latest", 404),
    ("smollm2:../../../models", 400), ("x/" * 8 + "y", 400), ("a" * 600, 400), ("", 400),
    ("../../etc/passwd", 404), ("/etc/passwd", 404), ("~/.ssh/id_rsa", 404),
])
def test_hostile_model_names_never_escape_the_store(http, name, status):
    for path in ("/v1/chat/completions", "/api/show"):
        response = http.post(path, json={"model": name, "messages": [{"role": "user", "content": "hi"}]},
                             headers=AUTH)
        expected = 400 if name == "" and path == "/v1/chat/completions" else status
        assert response.status_code == expected, (path, name, response.text)


def test_a_real_model_file_outside_the_store_is_not_loaded_by_path(http, smollm2_path):
    """Requests name models in the store; a path is looked up as a name, never opened."""
    response = http.post("/v1/chat/completions", headers=AUTH,
                         json={"model": str(smollm2_path), "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404 and "not pulled" in response.json()["error"]["message"]
    assert http.get("/api/ps", headers=AUTH).json()["models"] == []


def test_refusals_are_counted_in_metrics(http):
    http.get("/v1/models")
    text = http.get("/metrics", headers=AUTH).text
    assert re.search(r'localrun_requests_total\{route="unrouted",method="GET",status="401"\} [1-9]', text)


def test_the_cli_sends_the_key_from_the_environment(keyed):
    with_key = run_cli("status", env={**keyed.env(), "LOCALRUN_API_KEY": KEYS[1]}, timeout=60)
    assert with_key.returncode == 0, with_key.stderr
    assert "is running" in with_key.stdout
    without = run_cli("ps", env={**keyed.env(), "LOCALRUN_API_KEY": ""}, timeout=60)
    assert without.returncode != 0
    assert "API key" in without.stderr and "Traceback" not in without.stderr


# --- binding beyond loopback ------------------------------------------------------------------


def _serve(home, *args: str, env: dict[str, str]) -> subprocess.Popen:
    import os

    return subprocess.Popen([sys.executable, "-m", "localrun", "serve", *args],
                            env={**os.environ, "LOCALRUN_HOME": str(home), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_health(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("daemon did not become healthy")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_public_bind_without_a_key_refuses_to_start(tmp_path):
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()),
                     env={"LOCALRUN_HOME": str(tmp_path), "LOCALRUN_API_KEY": ""}, timeout=60)
    assert result.returncode == 2
    assert "--insecure" in result.stderr and "LOCALRUN_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


def test_public_bind_with_a_key_serves_any_host_name_but_needs_the_key(tmp_path):
    port = free_port()
    proc = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), env={"LOCALRUN_API_KEY": "secret"})
    try:
        _wait_health(port, proc)
        url = f"http://127.0.0.1:{port}/api/tags"
        assert httpx.get(url, headers={"Host": "myserver.lan"}).status_code == 401
        ok = httpx.get(url, headers={"Host": "myserver.lan", "Authorization": "Bearer secret"})
        assert ok.status_code == 200
    finally:
        _stop(proc)


def test_insecure_public_bind_starts_when_asked(tmp_path):
    port = free_port()
    proc = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--insecure", env={"LOCALRUN_API_KEY": ""})
    try:
        _wait_health(port, proc)
        assert httpx.get(f"http://127.0.0.1:{port}/api/tags", headers={"Host": "myserver.lan"}).status_code == 200
    finally:
        _stop(proc)


def test_official_clients_authenticate_with_the_key(keyed):
    import anthropic
    import ollama
    import openai

    good = openai.OpenAI(base_url=f"{keyed.url}/v1", api_key=KEYS[0], max_retries=0)
    assert any(m.id.startswith("smollm2") for m in good.models.list())
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{keyed.url}/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=keyed.url, api_key="wrong", max_retries=0).messages.create(
            model="smollm2", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    client = ollama.Client(host=keyed.url, headers={"Authorization": f"Bearer {KEYS[1]}"})
    assert any(m.model.startswith("smollm2") for m in client.list().models)
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=keyed.url).list()
    assert refused.value.status_code == 401 and "API key" in refused.value.error
