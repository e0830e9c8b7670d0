"""Replays of Claude Code's request shapes against the real daemon: a large system prompt in blocks
led by the per-request billing-header line, a dozen tools with draft-07 schemas, `?beta=true`, the
beta headers, streaming. The second request of a session must reuse the cached prefix even though
its billing line differs, and a forced call must validate against Claude Code-style schemas."""

from __future__ import annotations

import uuid

import anthropic
import jsonschema
import pytest

MODEL = "smollm2"
BETAS = "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
RULES = [
    "Be concise, direct, and to the point.", "Never introduce code that exposes or logs secrets and keys.",
    "When you edit a file, first read it, then keep its style.", "Prefer editing existing files to creating new ones.",
    "Use the TodoWrite tool to plan and track tasks.", "Run the project's lint and typecheck commands when done.",
    "Do not add comments unless asked.", "Answer in fewer than four lines unless the user asks for detail.",
    "Refuse to write code that may be used maliciously.", "Mention file paths as path:line so users can jump there.",
]


def _schema(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#"}


def _string(description: str) -> dict:
    return {"type": "string", "description": description}


TOOLS = [
    {"name": "Bash", "description": "Executes a bash command in a persistent shell session.",
     "input_schema": _schema({"command": _string("The command to execute"),
                              "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
                              "description": _string("Clear, concise description of what this command does")},
                             ["command"])},
    {"name": "Glob", "description": "Fast file pattern matching tool that works with any codebase size.",
     "input_schema": _schema({"pattern": _string("The glob pattern"), "path": _string("The directory to search")},
                             ["pattern"])},
    {"name": "Grep", "description": "A powerful search tool built on ripgrep.",
     "input_schema": _schema({"pattern": _string("The regular expression"), "path": _string("File or directory"),
                              "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                              "-i": {"type": "boolean"}, "head_limit": {"type": "number"}}, ["pattern"])},
    {"name": "LS", "description": "Lists files and directories in a given path.",
     "input_schema": _schema({"path": _string("The absolute path to list"),
                              "ignore": {"type": "array", "items": {"type": "string"}}}, ["path"])},
    {"name": "Read", "description": "Reads a file from the local filesystem.",
     "input_schema": _schema({"file_path": _string("The absolute path to the file"), "offset": {"type": "number"},
                              "limit": {"type": "number"}}, ["file_path"])},
    {"name": "Edit", "description": "Performs exact string replacements in files.",
     "input_schema": _schema({"file_path": _string("The file to modify"), "old_string": _string("Text to replace"),
                              "new_string": _string("The replacement"), "replace_all": {"type": "boolean",
                                                                                        "default": False}},
                             ["file_path", "old_string", "new_string"])},
    {"name": "MultiEdit", "description": "Makes multiple edits to a single file in one operation.",
     "input_schema": _schema({"file_path": _string("The file to modify"), "edits": {
         "type": "array", "minItems": 1, "items": {"type": "object", "additionalProperties": False, "properties": {
             "old_string": {"type": "string"}, "new_string": {"type": "string"}},
             "required": ["old_string", "new_string"]}}}, ["file_path", "edits"])},
    {"name": "Write", "description": "Writes a file to the local filesystem.",
     "input_schema": _schema({"file_path": _string("The absolute path"), "content": _string("The content")},
                             ["file_path", "content"])},
    {"name": "WebFetch", "description": "Fetches content from a URL and processes it.",
     "input_schema": _schema({"url": {"type": "string", "format": "uri"}, "prompt": _string("What to extract")},
                             ["url", "prompt"])},
    {"name": "TodoWrite", "description": "Create and manage a structured task list for your coding session.",
     "input_schema": _schema({"todos": {"type": "array", "items": {"type": "object", "properties": {
         "content": {"type": "string", "minLength": 1},
         "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
         "id": {"type": "string"}}, "required": ["content", "status", "id"], "additionalProperties": False}}},
         ["todos"])},
    {"name": "Task", "description": "Launch a new agent to handle complex, multi-step tasks autonomously.",
     "input_schema": _schema({"description": _string("A short task description"), "prompt": _string("The task"),
                              "subagent_type": _string("The type of agent")}, ["description", "prompt"])},
    {"name": "ExitPlanMode", "description": "Prompts the user to exit plan mode and start coding.",
     "input_schema": _schema({"plan": _string("The plan you came up with")}, ["plan"])},
]


def system(session: str) -> list[dict]:
    """Claude Code's system blocks: a billing line that changes per request, then the real prompt."""
    instructions = "\n".join(f"- {rule}" for _ in range(6) for rule in RULES)
    return [
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.0.14.a1b; cc_entrypoint=cli; "
                                 f"cch={uuid.uuid4().hex[:5]};"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": f"You are an interactive CLI tool that helps users with software engineering "
                                 f"tasks.\n\n# Rules\n{instructions}\n\nWorking directory: /home/u/{session}\n",
         "cache_control": {"type": "ephemeral"}},
    ]


def user_turn(text: str) -> dict:
    return {"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer, use the context below.\n# claudeMd\n"
                                 "Codebase instructions: run pytest before committing.\n</system-reminder>"},
        {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}


@pytest.fixture(scope="module")
def client(daemon):
    return anthropic.Anthropic(base_url=daemon.url, auth_token="localrun", api_key=None, max_retries=0,
                               default_headers={"anthropic-beta": BETAS, "x-app": "cli",
                                                "user-agent": "claude-cli/2.0.14 (external, cli)"})


def _stream(client, max_tokens: int = 64, temperature: float = 1, **request):
    """One streamed request as Claude Code sends it (it asks for far more tokens; 64 keep the test short)."""
    with client.messages.stream(model=MODEL, max_tokens=max_tokens, tools=TOOLS, extra_query={"beta": "true"},
                                metadata={"user_id": "user_abc_session"}, extra_body={"temperature": temperature},
                                **request) as stream:
        events = [event.type for event in stream]
        return events, stream.get_final_message()


def test_a_claude_code_session_is_answered_and_reuses_its_cached_prefix(client):
    first_turn = [user_turn("What does this project do? Answer in one sentence.")]
    events, first = _stream(client, system=system("proj"), messages=first_turn)
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert first.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert first.content and all(b.type in ("text", "tool_use") for b in first.content)
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert prompt > 1500  # the system prompt and a dozen tool schemas are in it

    answer = [b.model_dump(exclude_none=True, exclude={"parsed_output"}) for b in first.content]
    second_turn = first_turn + [{"role": "assistant", "content": answer}]
    if first.stop_reason == "tool_use":
        second_turn.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                                                        for b in first.content if b.type == "tool_use"]})
    else:
        second_turn.append(user_turn("Thanks. And how do I run its tests?"))
    events, second = _stream(client, system=system("proj"), messages=second_turn)  # a new billing line
    assert events[-1] == "message_stop" and second.content
    assert second.usage.cache_read_input_tokens >= prompt - 80  # all but the first turn's tail was cached
    assert second.usage.input_tokens < second.usage.cache_read_input_tokens


def test_required_call_matches_a_claude_code_schema(client):
    events, message = _stream(client, max_tokens=200, temperature=0, system=system("forced"),
                              tool_choice={"type": "any"}, messages=[user_turn("Run the tests with pytest.")])
    [use] = message.content
    assert use.type == "tool_use" and message.stop_reason == "tool_use"
    jsonschema.validate(use.input, next(t["input_schema"] for t in TOOLS if t["name"] == use.name))
    assert events.count("content_block_start") == 1 and "input_json" in events
