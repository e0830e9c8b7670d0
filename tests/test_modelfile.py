"""Modelfiles: parsed from plain text (table-tested), made into models that share their base's file
(`localrun create`, /api/create), shown back (`show --modelfile`, /api/show), and applied on every API."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.errors import InvalidRequest
from localrun.store import Modelfile, Store, parse_modelfile
from localrun.store.modelfile import render_modelfile
from tests.cli import run_cli


@pytest.mark.parametrize("text, expected", [
    ("FROM smollm2", Modelfile(base="smollm2")),
    ("# a comment\n\nfrom ./model.gguf\n", Modelfile(base="./model.gguf")),
    ("FROM m\nPARAMETER temperature 0.2\nPARAMETER num_ctx 2048\nPARAMETER stop <end>\nPARAMETER stop \"User:\"",
     Modelfile(base="m", parameters={"temperature": 0.2, "num_ctx": 2048, "stop": ["<end>", "User:"]})),
    ("FROM m\nSYSTEM You are Mario.", Modelfile(base="m", system="You are Mario.")),
    ('FROM m\nSYSTEM """Line one.\nLine "two".\n"""', Modelfile(base="m", system='Line one.\nLine "two".\n')),
    ('FROM m\nSYSTEM ""', Modelfile(base="m", system="")),  # present and empty: clears the base's
    ('FROM m\nTEMPLATE """{% for m in messages %}{{ m.content }}{% endfor %}"""',
     Modelfile(base="m", template="{% for m in messages %}{{ m.content }}{% endfor %}")),
    ("FROM m\nMESSAGE user Is it hot?\nMESSAGE assistant \"Yes.\"",
     Modelfile(base="m", messages=({"role": "user", "content": "Is it hot?"}, {"role": "assistant", "content": "Yes."}))),
    ('FROM m\nLICENSE """MIT"""\nLICENSE Apache-2.0', Modelfile(base="m", license="MIT\n\nApache-2.0")),
    ("FROM a\nFROM b\nPARAMETER seed 1\nPARAMETER seed 2", Modelfile(base="b", parameters={"seed": 2})),
    # as in Ollama, a newline is written as one inside triple quotes: quotes keep a backslash as it is
    ('FROM m\nPARAMETER stop """\n\n"""\nPARAMETER stop "\\n"\nMESSAGE user """ hi """',
     Modelfile(base="m", parameters={"stop": ["\n\n", "\\n"]}, messages=({"role": "user", "content": " hi "},))),
])
def test_a_modelfile_parses_into_its_commands(text, expected):
    assert parse_modelfile(text) == expected


@pytest.mark.parametrize("text, words", [
    ("PARAMETER temperature 1", "no FROM line"),
    ("FROM m\nPARAMETER temprature 1", "unknown parameter 'temprature'"),
    ("FROM m\nPARAMETER top_p 2", "top_p: '2' must be from 0 to 1"),
    ("FROM m\nPARAMETER num_ctx lots", "num_ctx: 'lots' is not a valid value"),
    ("FROM m\nPARAMETER seed", "PARAMETER needs a name and a value"),
    ("FROM m\nSYSTEM \"\"\"never closed", 'line 2: SYSTEM\'s """ is never closed'),
    ("FROM m\nMESSAGE tool hi", "MESSAGE role must be one of"),
    ("FROM m\nTEMPLATE {{ .Prompt }}", "Ollama Go template"),
    ("FROM m\nTEMPLATE {% if %}", "not a valid Jinja template"),
    ("FROM m\nADAPTER ./lora.gguf", "ADAPTER is not supported"),
    ("FROM m\nQUANTIZE q4", "unknown command 'QUANTIZE'"),
    ("FROM", "FROM needs a model name"),
])
def test_a_bad_modelfile_is_refused_naming_the_line_and_the_mistake(text, words):
    with pytest.raises(InvalidRequest, match="Modelfile") as e:
        parse_modelfile(text)
    assert words in e.value.message


def test_a_rendered_modelfile_reads_back_the_same():
    made = Modelfile(base="/x/blob", parameters={"temperature": 0.5, "stop": ["<a>", 'say "b"', "\n", " User:"]},
                     system="Be brief.\nAlways.", template="{{ messages[0].content }}",
                     messages=({"role": "user", "content": "hi"},), license="MIT")
    text = render_modelfile(made.base, made.parameters, made.system, made.template, made.messages, made.license)
    assert parse_modelfile(text) == made


def test_a_created_model_shares_its_bases_file_and_keeps_what_the_modelfile_does_not_change(smollm2_path):
    store = Store()
    first = store.create("first", parse_modelfile(f"FROM {smollm2_path}\nPARAMETER temperature 0.1\nSYSTEM one"))
    second = store.create("second", parse_modelfile("FROM first\nPARAMETER top_k 5"))
    assert first.digest == second.digest and len(list(store.layout.blob_digests())) == 1
    assert second.defaults == {"temperature": 0.1, "top_k": 5} and second.system == "one"
    store.create("first", parse_modelfile('FROM first\nSYSTEM ""'))  # creating a name again edits it
    assert store.resolve("first").system == "" and store.resolve("first").defaults == {"temperature": 0.1}


def test_create_and_show_through_the_cli(tmp_path, smollm2_path):
    (tmp_path / "model.gguf").symlink_to(smollm2_path)
    (tmp_path / "Modelfile").write_text("FROM ./model.gguf\nPARAMETER num_ctx 512\nSYSTEM \"\"\"Say yes.\"\"\"\n")
    made = run_cli("create", "yes-man", "-f", str(tmp_path / "Modelfile"))
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("created yes-man:latest")
    shown = run_cli("show", "yes-man", "--modelfile").stdout
    assert "PARAMETER num_ctx 512" in shown and 'SYSTEM "Say yes."' in shown and "TEMPLATE" in shown
    plain = run_cli("show", "yes-man").stdout
    assert "loads with        512 tokens per request x 4 slots (its Modelfile's num_ctx)" in plain, plain
    assert "Parameters" in plain and "System" in plain and "Say yes." in plain
    bad = run_cli("create", "x", "-f", str(tmp_path / "missing"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot read the Modelfile")
    (tmp_path / "Bad").write_text("FROM yes-man\nPARAMETER nope 1\n")
    bad = run_cli("create", "x", "-f", str(tmp_path / "Bad"))
    assert bad.returncode == 1 and "Modelfile line 2: unknown parameter 'nope'" in bad.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tests.daemon import start_daemon

    d = start_daemon(tmp_path_factory.mktemp("modelfile-home"), {"LOCALRUN_PARALLEL": "1", "LOCALRUN_CTX_SIZE": "1024"})
    yield d
    d.stop()


STORY = [{"role": "user", "content": "Write a poem about the sea."}]


def test_api_create_makes_a_model_whose_defaults_apply_on_every_api(served):
    """A model made over /api/create with temperature 0, num_predict 12 and a system prompt answers
    greedily, 12 tokens, with that system prompt, whichever dialect asks; a request's own value wins.
    (Its repeat_penalty 1 keeps Ollama's own default of 1.1 out, which changed the answer on one CPU.)"""
    url = served.url
    lines = httpx.post(f"{url}/api/create", timeout=60, json={
        "model": "poet", "from": "smollm2", "system": "You are a pirate.",
        "parameters": {"temperature": 0, "num_predict": 12, "repeat_penalty": 1}}).text.splitlines()
    assert json.loads(lines[-1])["status"] == "success"
    greedy = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": "smollm2", "temperature": 0, "max_tokens": 12, "ignore_eos": True,
        "messages": [{"role": "system", "content": "You are a pirate."}, *STORY]}).json()
    openai = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": "poet", "messages": STORY, "ignore_eos": True}).json()
    ollama = httpx.post(f"{url}/api/chat", timeout=120, json={"model": "poet", "messages": STORY, "stream": False}).json()
    anthropic = httpx.post(f"{url}/v1/messages", timeout=120, json={
        "model": "poet", "messages": STORY, "max_tokens": 12}).json()
    own = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": "poet", "messages": STORY, "max_tokens": 3}).json()
    expected = greedy["choices"][0]["message"]["content"]
    assert openai["choices"][0]["message"]["content"] == expected and openai["usage"]["completion_tokens"] == 12
    assert openai["usage"]["prompt_tokens"] == greedy["usage"]["prompt_tokens"]  # the system prompt is in
    assert expected.startswith(ollama["message"]["content"]) and ollama["prompt_eval_count"] == greedy["usage"]["prompt_tokens"]
    assert expected.startswith(anthropic["content"][0]["text"])
    assert own["usage"]["completion_tokens"] == 3
    counted = httpx.post(f"{url}/v1/messages/count_tokens", timeout=60, json={"model": "poet", "messages": STORY})
    assert counted.json()["input_tokens"] == greedy["usage"]["prompt_tokens"]  # the count has the system prompt too
    shown = httpx.post(f"{url}/api/show", timeout=30, json={"model": "poet"}).json()
    assert shown["system"] == "You are a pirate." and "temperature" in shown["parameters"]
    assert "PARAMETER num_predict 12" in shown["modelfile"] and 'SYSTEM "You are a pirate."' in shown["modelfile"]


def test_create_with_host_makes_the_model_in_the_servers_store(served, tmp_path):
    (tmp_path / "Modelfile").write_text("FROM smollm2\nPARAMETER top_k 7\nSYSTEM Be terse.\n")
    made = run_cli("create", "remote-made", "-f", str(tmp_path / "Modelfile"), "--host", served.url)
    assert made.returncode == 0 and made.stdout == f"created remote-made on {served.url}\n", made.stderr
    shown = run_cli("show", "remote-made", "--modelfile", "--host", served.url).stdout
    assert "PARAMETER top_k 7" in shown and 'SYSTEM "Be terse."' in shown


def test_api_create_takes_an_old_clients_modelfile_text_and_refuses_what_it_cannot_do(served):
    url = served.url
    made = httpx.post(f"{url}/api/create", timeout=60, json={
        "name": "templated", "stream": False,
        "modelfile": 'FROM smollm2\nTEMPLATE """{% for m in messages %}{{ m.content }}\n{% endfor %}"""'})
    assert made.json() == {"status": "success"}
    answer = httpx.post(f"{url}/api/generate", timeout=120, json={
        "model": "templated", "prompt": "hello there", "stream": False, "options": {"num_predict": 1}}).json()
    assert answer["prompt_eval_count"] <= 4  # "hello there\n" alone, not SmolLM2's ChatML with its system prompt
    for body, words in [({"from": "/etc/passwd"}, "over HTTP"), ({"from": "smollm2", "files": {"a": "b"}}, "files"),
                        ({"from": "smollm2", "parameters": {"top_p": 7}}, "top_p"),
                        ({"from": "smollm2", "template": "{{ .Prompt }}"}, "Go template"), ({}, "from")]:
        refused = httpx.post(f"{url}/api/create", timeout=30, json={"model": "x", **body})
        assert refused.status_code == 400 and words in refused.json()["error"], (body, refused.text)
