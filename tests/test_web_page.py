"""The chat page in a real headless browser: Debian's Chromium driven by Playwright's Python API,
against real daemons serving the bundled SmolLM2. One browser for the module; each test gets a fresh
browser context (its own storage). Screenshots are kept in each test's tmp_path."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.daemon import start_daemon
from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium)")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MODEL = "smollm2:135m"
KEY = "web-page-key"
PAYLOAD = ("<img src=x onerror=window.__pwned=1><img src='x' onerror='window.__pwned=2'>"
           "<script>window.__pwned=3</script>")

# Runs in the page before its own scripts (an init script is not subject to the page's CSP): it
# records what the Content-Security-Policy refused, so a test can tell the sanitizer from the CSP.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
# Nothing the model or a file wrote may have become script, handler or remote fetch.
INERT = """() => ({
  pwned: window.__pwned ?? null,
  scripts: document.querySelectorAll('#messages script, #conversations script').length,
  handlers: [...document.querySelectorAll('*')]
    .filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
  fetchedImages: [...document.querySelectorAll('#messages img')].map((i) => i.getAttribute('src'))
    .filter((src) => src && !src.startsWith('data:')),
  violations: window.__violations,
})"""
INERT_RESULT = {"pwned": None, "scripts": 0, "handlers": 0, "fetchedImages": [], "violations": []}


@dataclass
class Tab:
    page: Any
    shots: Path
    errors: list[str] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    statuses: list[tuple[int, str]] = field(default_factory=list)

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"))

    def stored(self) -> list[dict[str, Any]]:
        return self.page.evaluate("JSON.parse(localStorage.getItem('localrun.conversations'))")

    def last(self, role: str) -> str:
        return self.page.locator(f"#messages article.{role} .body").last.inner_text()

    def settings(self, **values: str) -> None:
        if self.page.locator("#settings").is_hidden():
            self.page.click("#settings-toggle")
        for name, value in values.items():
            self.page.fill(f"#{name}", value)

    def send(self, text: str) -> None:
        """Type and press Enter, then wait for the answer to finish (the page leaves its busy state)."""
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")
        self.page.wait_for_selector("body:not(.busy)", timeout=120_000)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """A daemon of this module's own: the page's answers are checked as text, so no other module's
    requests (a reloaded context, a model default) may change what the shared one answers with."""
    d = start_daemon(tmp_path_factory.mktemp("web-daemon-home"))
    yield d
    d.stop()


@pytest.fixture(scope="module")
def browser():

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def open_page(browser, tmp_path):
    contexts = []

    def open_(url: str, ready: bool = True, **options: Any) -> Tab:
        context = browser.new_context(**options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        tab = Tab(page, tmp_path)
        page.add_init_script(WATCH)
        page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: tab.errors.append(str(e)))
        page.on("request", lambda r: tab.requests.append(r))
        page.on("response", lambda r: tab.statuses.append((r.status, urlsplit(r.url).path)))
        page.goto(url)
        if ready:
            page.wait_for_selector("body[data-ready=true]", state="attached")
        return tab

    yield open_
    for context in contexts:
        context.close()


def admitted(daemon) -> int:
    """Requests the daemon holds for the model (running or queued), from /metrics."""
    text = httpx.get(daemon.url + "/metrics", timeout=10).text
    found = re.search(r'^localrun_requests_admitted\{model="smollm2:135m"\} (\d+)', text, re.M)
    return int(found.group(1)) if found else 0


def besides_401(errors: list[str]) -> list[str]:
    """Console errors but the lines Chromium logs for each 401 the page got before it had the key."""
    return [e for e in errors if "status of 401" not in e]


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_the_page_loads_from_the_daemon_alone_with_no_console_errors(daemon, open_page):
    tab = open_page(daemon.url + "/")
    options = tab.page.eval_on_selector_all("#model option", "options => options.map((o) => o.value)")
    assert MODEL in options
    assert {urlsplit(r.url).netloc for r in tab.requests} == {f"127.0.0.1:{daemon.port}"}  # no CDN, no elsewhere
    assert tab.errors == [] and tab.page.evaluate("window.__violations") == []
    tab.shot("loaded")


THINKING = [  # content, reasoning_content -> thinking, answer
    ("plain", "", "", "plain"),
    ("<think>why</think>\n\nso", "", "why", "so"),
    ("  <think>still thinking", "", "still thinking", ""),
    ("so <think>not leading</think>", "", "", "so <think>not leading</think>"),
    ("answer", "apart", "apart", "answer"),
]
IMPORTS = [  # file text -> conversations read back, or the error
    ('{"conversations": [{"id": "a", "messages": [{"role": "user", "content": "hi"}]}]}', 1),
    ('[{"messages": [{"role": "tool", "content": 1}, {"role": "assistant", "content": ["x"]}]}]', 1),
    ('{"conversations": [{"messages": "no"}]}', "no conversation in the file could be read"),
    ('{"chats": []}', 'not a conversations export (no "conversations" list)'),
    ("not json", "SyntaxError"),
]


def test_the_page_logic_from_tables(daemon, open_page):
    """splitThinking, statsLine and the import parser, run as the page's own modules."""
    tab = open_page(daemon.url + "/")
    got = tab.page.evaluate("""async ([thinking, imports]) => {
        const render = await import('/ui/render.js');
        const store = await import('/ui/conversations.js');
        const read = (text) => { try { return store.parseImport(text).length; } catch (e) {
            return e instanceof SyntaxError ? 'SyntaxError' : e.message; } };
        return {
          thinking: thinking.map(([content, reasoning]) => Object.values(render.splitThinking(content, reasoning))),
          imports: imports.map(([text]) => read(text)),
          stats: render.statsLine({prompt_tokens: 30, cached_tokens: 10, completion_tokens: 10,
                                   tokens_per_second: 12.345, context_length: 400}),
          cleaned: store.parseImport(imports[1][0])[0].messages,
        };
    }""", [THINKING, IMPORTS])
    assert got["thinking"] == [[thinking, answer] for _, _, thinking, answer in THINKING]
    assert got["imports"] == [expected for _, expected in IMPORTS]
    assert got["stats"] == "10 tokens · 12.3 tok/s · prompt 30 (10 cached) · context 40 / 400 (10%)"
    assert got["cleaned"] == [{"role": "assistant", "content": ""}]  # wrong roles and types do not survive


def test_a_message_streams_an_answer_with_its_stats_and_survives_a_reload(daemon, open_page):
    tab = open_page(daemon.url + "/")
    tab.settings(temperature="0", max_tokens="32")
    tab.page.evaluate("""window.__renders = 0;
        new MutationObserver(() => window.__renders++)
            .observe(document.getElementById('messages'), {childList: true})""")
    tab.page.fill("#input", "Write a short poem")
    tab.page.press("#input", "Shift+Enter")  # a new line, not a send
    tab.page.type("#input", "about the sea.")
    assert tab.page.locator("article.msg").count() == 0
    tab.page.press("#input", "Enter")
    tab.page.wait_for_selector("body:not(.busy)", timeout=120_000)

    assert tab.last("user") == "Write a short poem\nabout the sea."
    answer = tab.last("assistant")
    assert answer.strip()
    assert tab.page.evaluate("window.__renders") >= 4  # drawn piece by piece as it streamed, not at once
    stats = tab.page.locator("#messages article.assistant .stats").last.inner_text()
    found = re.fullmatch(r"(\d+) tokens · [\d.]+ tok/s · prompt \d+( \(\d+ cached\))? · context \d+ / \d+ \(\d+%\)",
                         stats)
    assert found and 0 < int(found.group(1)) <= 32, stats
    assert "loaded" in tab.page.locator("#model option:checked").inner_text()  # the model is marked as loaded now
    tab.shot("answered")

    tab.page.reload()
    tab.page.wait_for_selector("body[data-ready=true]", state="attached")
    assert tab.last("user") == "Write a short poem\nabout the sea."
    assert tab.last("assistant") == answer
    assert tab.page.locator("#conversations li.active").inner_text().startswith("Write a short poem")
    assert tab.errors == []


def test_regenerate_and_edit_and_resend_replace_the_answer(daemon, open_page):
    tab = open_page(daemon.url + "/")
    tab.settings(max_tokens="12", seed="1", top_k="20", system="Answer in one word.")
    tab.send("Name a fruit.")
    body = next(r for r in tab.requests if r.url.endswith("/v1/chat/completions")).post_data_json
    assert body["messages"] == [{"role": "system", "content": "Answer in one word."},
                                {"role": "user", "content": "Name a fruit."}]
    assert (body["max_tokens"], body["seed"], body["top_k"]) == (12, 1, 20)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    tab.page.click("#messages article.assistant button:text('Regenerate')")
    tab.page.wait_for_selector("body:not(.busy)", timeout=120_000)
    assert [m["role"] for m in tab.stored()[0]["messages"]] == ["user", "assistant"]

    tab.page.click("#messages article.user button:text('Edit')")
    tab.page.fill("#messages textarea.edit", "Name a colour.")
    tab.page.press("#messages textarea.edit", "Enter")
    tab.page.wait_for_selector("body:not(.busy)", timeout=120_000)
    messages = tab.stored()[0]["messages"]
    assert [(m["role"], m["content"] if m["role"] == "user" else "") for m in messages] == [
        ("user", "Name a colour."), ("assistant", "")]
    assert messages[1]["content"] and messages[1]["stats"]["completion_tokens"] <= 12
    assert tab.errors == []


def test_a_streaming_redraw_left_waiting_when_the_answer_ends_draws_nothing(daemon, open_page):
    """Streaming redraws wait for the next animation frame; one still pending when the answer ends
    must not replace the finished answer (its buttons) with a streaming one. The page's clock is
    paused, so no frame comes until the test lets one; this had failed now and then in CI."""
    tab = open_page(daemon.url + "/")
    tab.page.clock.install()
    tab.page.clock.pause_at(time.time() + 60)
    tab.settings(max_tokens="4", seed="1")
    tab.send("Name a fruit.")
    regenerate = tab.page.locator("#messages article.assistant button:text('Regenerate')")
    expect(regenerate).to_be_visible()
    tab.page.clock.run_for(1000)
    expect(regenerate).to_be_visible()
    assert tab.errors == []


def test_stop_ends_the_answer_and_the_daemon_drops_the_request(daemon, open_page):
    tab = open_page(daemon.url + "/")
    tab.settings(max_tokens="3000", extra='{"ignore_eos": true}')  # without Stop: thousands of tokens
    tab.page.fill("#input", "Count from one to one thousand.")
    tab.page.press("#input", "Enter")
    tab.page.wait_for_function("() => document.querySelector('#messages .assistant .body')?.textContent.length > 20")
    assert wait_for(lambda: admitted(daemon) == 1)
    tab.page.click("#stop")
    tab.page.wait_for_selector("body:not(.busy)")

    assert tab.page.locator("#messages article.assistant .note").inner_text() == "Stopped."
    shown = tab.last("assistant")
    time.sleep(0.5)
    assert tab.last("assistant") == shown  # nothing arrives after Stop
    assert wait_for(lambda: admitted(daemon) == 0, timeout=5)  # the daemon saw the hang-up and let go
    reply = tab.stored()[0]["messages"][-1]
    assert reply["stopped"] is True and reply["content"]
    assert tab.errors == []


def test_html_in_a_model_answer_runs_nothing(daemon, open_page):
    """The grammar makes the real model write the payload (a JSON string that may only be PAYLOAD)."""
    tab = open_page(daemon.url + "/")
    schema = {"type": "string", "enum": [PAYLOAD]}
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    tab.settings(max_tokens="200", extra=json.dumps({"response_format": response_format}))  # the grammar ends it
    tab.send("Answer.")
    assert tab.stored()[0]["messages"][-1]["content"] == json.dumps(PAYLOAD)  # the model did write it
    assert tab.last("assistant") == json.dumps(PAYLOAD)  # shown as the text it is
    assert tab.page.evaluate(INERT) == INERT_RESULT
    assert tab.errors == []
    tab.shot("inert")


def test_a_tool_call_the_model_makes_is_shown(daemon, open_page):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    forced = {"type": "function", "function": {"name": "get_weather"}}
    tab = open_page(daemon.url + "/")
    tab.settings(max_tokens="40", extra=json.dumps({"tools": [tool], "tool_choice": forced}))
    tab.send("What is the weather in Paris?")
    expect(tab.page.locator("details.tool-call summary")).to_have_text("Tool call: get_weather")
    arguments = json.loads(tab.page.locator("details.tool-call pre").inner_text())
    assert isinstance(arguments["city"], str)
    assert tab.errors == []


def test_an_imported_conversation_renders_markdown_inertly_and_exports_again(daemon, open_page, tmp_path):
    tab = open_page(daemon.url + "/")
    tab.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    code = "```python\ndef f():\n    return 1\n```"
    pixel = "data:image/gif;base64,R0lGODlhAQABAAAAACw="
    answer = (f"<think>{PAYLOAD}</think>Here:\n\n{code}\n\n{PAYLOAD} [x](javascript:alert(1))\n\n"
              f"![remote](http://127.0.0.2:9/track.png) ![inline]({pixel})")
    conversation = {"id": "c1", "title": PAYLOAD, "model": MODEL, "system": "", "settings": {"temperature": 0.5},
                    "onload": "alert(1)", "updated": 1, "messages": [
                        {"role": "system", "content": "dropped"}, {"role": "user", "content": PAYLOAD},
                        {"role": "assistant", "content": answer,
                         "tool_calls": [{"function": {"name": PAYLOAD, "arguments": '{"a": 1}'}}]}]}
    hostile_name = tmp_path / "<img src=x onerror=window.__pwned=3>.json"
    hostile_name.write_text(json.dumps({"format": "localrun.conversations", "conversations": [conversation]}))
    with tab.page.expect_file_chooser() as chooser:
        tab.page.click("#import-button")
    chooser.value.set_files(str(hostile_name))

    expect(tab.page.locator("#toast")).to_have_text(f"Imported 1 conversation(s) from {hostile_name.name}.")
    assert tab.page.locator("#conversations li.active .title").inner_text() == PAYLOAD
    assert tab.last("user") == PAYLOAD
    assert not tab.page.locator("details.thinking").get_attribute("open")  # thinking is shown collapsed
    assert tab.page.locator("#messages code .hljs-keyword").first.inner_text() == "def"
    assert "Tool call: " in tab.page.locator("details.tool-call summary").inner_text()
    assert tab.page.locator("#messages a").get_attribute("href") is None  # javascript: links lose their href
    assert tab.page.locator("#messages img").evaluate_all("images => images.map((i) => i.alt)") == ["remote", "inline"]
    assert PAYLOAD in tab.last("assistant")
    assert tab.page.evaluate(INERT) == INERT_RESULT  # and the remote image has no src: nothing is fetched
    tab.page.click("pre .copy")
    assert tab.page.evaluate("navigator.clipboard.readText()").startswith("def f():\n    return 1")

    with tab.page.expect_download() as download:
        tab.page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text())
    [back] = exported["conversations"]
    assert back["title"] == PAYLOAD and [m["role"] for m in back["messages"]] == ["user", "assistant"]
    assert back["messages"][1]["content"] == answer and "onload" not in back
    assert tab.errors == []
    tab.shot("imported")


def test_the_page_works_under_a_reverse_proxys_sub_path(daemon, open_page):
    """A proxy that serves the daemon at /chat/ (played by the browser's own request routing)."""
    def proxy(route):
        path = urlsplit(route.request.url).path.removeprefix("/chat")
        route.fulfill(response=route.fetch(url=daemon.url + path))

    tab = open_page("about:blank", ready=False)
    tab.page.route(f"{daemon.url}/chat/**", proxy)
    tab.page.goto(f"{daemon.url}/chat/")
    tab.page.wait_for_selector("body[data-ready=true]", state="attached")
    tab.settings(max_tokens="4")
    tab.send("Hi")
    assert tab.last("assistant").strip()
    assert {urlsplit(r.url).path.split("/")[1] for r in tab.requests if r.url.startswith(daemon.url)} == {"chat"}
    assert tab.errors == []


def test_phone_layout_and_light_and_dark_themes(daemon, open_page):
    tab = open_page(daemon.url + "/", viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True)
    background = "getComputedStyle(document.body).backgroundColor"
    assert tab.page.evaluate(background) == "rgb(21, 23, 28)"
    box = tab.page.locator("#sidebar").bounding_box()
    assert box["x"] + box["width"] <= 0  # the conversation list waits off screen
    assert tab.page.locator("#input").bounding_box()["width"] > 250
    tab.page.click("#menu")
    tab.page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().x >= 0")
    tab.shot("phone-menu")
    tab.page.click("#theme")  # auto -> light
    assert tab.page.locator("#theme").inner_text() == "Theme: light"
    assert tab.page.evaluate(background) == "rgb(255, 255, 255)"
    tab.page.reload()
    tab.page.wait_for_selector("body[data-ready=true]", state="attached")
    assert tab.page.evaluate(background) == "rgb(255, 255, 255)"  # the choice is kept
    assert tab.errors == []


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("web-keyed"), {"LOCALRUN_API_KEY": KEY})
    yield d
    d.stop()


def test_with_an_api_key_the_page_asks_for_it_and_keeps_it_out_of_urls(keyed, open_page):
    tab = open_page(f"http://localhost:{keyed.port}/", ready=False)  # localhost passes the Host and Origin guards too
    tab.page.wait_for_selector("#key-dialog[open]")
    assert (401, "/v1/models") in tab.statuses
    tab.page.fill("#key", "wrong")
    tab.page.press("#key", "Enter")
    tab.page.wait_for_function("() => document.getElementById('key-reason').textContent.includes('refused')")
    tab.shot("key-refused")
    tab.page.fill("#key", KEY)
    tab.page.click("#key-ok")
    tab.page.wait_for_selector("body[data-ready=true]", state="attached")
    assert MODEL in tab.page.eval_on_selector_all("#model option", "options => options.map((o) => o.value)")

    tab.settings(max_tokens="8")
    tab.send("Hi")
    assert tab.last("assistant").strip()
    chat = [r for r in tab.requests if r.url.endswith("/v1/chat/completions")]
    assert chat and all(r.headers.get("authorization") == f"Bearer {KEY}" for r in chat)
    assert not any(KEY in r.url for r in tab.requests)
    assert tab.page.evaluate("[sessionStorage.getItem('localrun.apiKey'), localStorage.getItem('localrun.apiKey')]") \
        == [KEY, None]  # "remember" was not ticked
    assert besides_401(tab.errors) == []


def test_pulling_a_model_shows_its_progress(keyed, open_page, tmp_path):
    tab = open_page(f"http://127.0.0.1:{keyed.port}/", ready=False)
    tab.page.fill("#key", KEY)
    tab.page.click("#key-ok")
    tab.page.wait_for_selector("body[data-ready=true]", state="attached")
    before = tab.page.locator("#model option").count()
    model = write_tiny_gguf(tmp_path / "Tiny-Q4_K_M.gguf", floats=1 << 20)  # 4 MiB: four 1 MiB chunks
    with FileServer() as server:
        url = server.add("/Tiny-Q4_K_M.gguf", model)
        server.fault("/Tiny-Q4_K_M.gguf", slow=0.3)
        tab.page.fill("#pull-name", url)
        tab.page.click("#pull-button")
        tab.page.wait_for_function("() => { const p = document.getElementById('pull-progress');"
                                   " return !p.hidden && p.value > 0 && p.value < 1; }")
        tab.shot("pulling")
        tab.page.wait_for_function("() => document.getElementById('pull-status').textContent.startsWith('Pulled')")
    assert tab.page.locator("#pull-progress").is_hidden()
    assert tab.page.locator("#model option").count() == before + 1

    tab.page.fill("#pull-name", "no-such-model:1b")
    tab.page.click("#pull-button")
    tab.page.wait_for_function("() => document.getElementById('pull-status').textContent.startsWith('Pull failed')")
    assert besides_401(tab.errors) == []
