"""The daemon's access log: one line per request (route, status, model, tokens, times; never the prompt)
and the request id the client gets back in `X-Request-Id`."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from localrun.server.access_log import Record, line, request_id

SECRET = "purple-elephant-4711"


def log_line(daemon, request_id: str, timeout: float = 10.0) -> str:
    """The access line of `request_id` in the daemon's log (written when the response ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for text in daemon.log.read_text(errors="replace").splitlines():
            if "localrun.access:" in text and text.endswith(f" id={request_id}"):
                return text
        time.sleep(0.1)
    raise AssertionError(f"no access line for {request_id}")


def test_a_generation_is_logged_with_model_tokens_and_times_but_not_its_prompt(daemon):
    body = {"model": "smollm2", "messages": [{"role": "user", "content": f"Say {SECRET}."}], "max_tokens": 5}
    response = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, headers={"X-Request-Id": "script-run-7"},
                          timeout=120)
    assert response.status_code == 200 and response.headers["x-request-id"] == "script-run-7"
    usage = response.json()["usage"]
    text = log_line(daemon, "script-run-7")
    assert re.search(rf"127\.0\.0\.1 POST /v1/chat/completions 200 model=smollm2:135m "
                     rf"prompt={usage['prompt_tokens']} generated={usage['completion_tokens']} "
                     rf"first=\d+\.\d{{3}}s total=\d+\.\d{{3}}s id=script-run-7$", text), text
    assert SECRET not in daemon.log.read_text(errors="replace")


def test_every_request_gets_an_id_and_a_line_even_when_refused(daemon):
    streamed = {"model": "smollm2", "prompt": "Hi", "options": {"num_predict": 3}}
    with httpx.stream("POST", f"{daemon.url}/api/generate", json=streamed, timeout=120) as response:
        response.read()
        ollama_id = response.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{16}", ollama_id)
    text = log_line(daemon, ollama_id)
    assert re.search(r" POST /api/generate 200 model=smollm2:135m prompt=\d+ generated=\d+ ", text), text
    missing = httpx.get(f"{daemon.url}/no/such/path?api_key={SECRET}", headers={"X-Request-Id": "bad id; rm -rf"})
    assert missing.status_code == 404
    text = log_line(daemon, missing.headers["x-request-id"])
    assert " GET /no/such/path 404 " in text and SECRET not in text  # a client's odd id is replaced, too


def test_the_line_from_plain_data():
    scope = {"client": ("10.0.0.2", 5123), "method": "BREW", "path": "/a b\x1b[31m"}  # no route matched
    assert line(scope, 404, Record("abc"), None, 0.0123) == "10.0.0.2 other /a?b?[31m 404 total=0.012s id=abc"
    record = Record("r1", "gemma3:270m", 7, 3)
    routed = {"client": None, "method": "POST", "path": "/v1/score", "route": type("R", (), {"path": "/v1/score"})}
    assert line(routed, 200, record, 0.5, 2.0) == \
        "- POST /v1/score 200 model=gemma3:270m prompt=7 generated=3 first=0.500s total=2.000s id=r1"


@pytest.mark.parametrize("sent, kept", [("abc-123", True), ("a" * 64, True), ("a" * 65, False), ("x y", False),
                                        ("é", False), ("", False)])
def test_a_client_id_is_kept_only_when_it_is_a_plain_token(sent, kept):
    got = request_id([(b"x-request-id", sent.encode())])
    assert (got == sent) is kept and re.fullmatch(r"[A-Za-z0-9._:-]{1,64}", got)
