"""The per-token wire pieces on their own: the runner socket's line framing (Channel.send_all on
one side, the daemon's line splitter on the other) and the pre-rendered SSE/NDJSON chunk Template.
Each must give byte for byte what the plain path gives, whatever the text and however the bytes
are cut up in transit."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.runner.protocol import Channel, encode
from localrun.server.runner_process import _Lines
from localrun.server.streaming import HOLE, Template, ndjson, sse

MESSAGES = st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=30) | st.integers() | st.none(), max_size=4),
                    min_size=1, max_size=6)


@given(MESSAGES, st.lists(st.integers(min_value=1, max_value=40), max_size=30))
def test_lines_arrive_whole_however_the_bytes_are_cut(messages, cuts):
    data = b"".join(map(encode, messages))
    got: list[bytes] = []
    lines = _Lines(got.append, lambda: None)
    bounds = [0]
    for size in cuts:
        bounds.append(min(len(data), bounds[-1] + size))
    for start, end in zip(bounds, bounds[1:] + [len(data)]):
        if end > start:
            lines.data_received(data[start:end])
    assert got == [encode(m).rstrip(b"\n") for m in messages]


class CountingSocket(socket.socket):
    """A real socket that records each sendall."""

    writes: list[bytes]

    def sendall(self, data, *args):  # type: ignore[override]
        self.writes.append(bytes(data))
        return super().sendall(data, *args)


def test_send_all_is_one_write_of_one_line_per_message():
    """A step's messages leave in one write and come out as separate messages, in order."""
    messages = [{"type": "delta", "id": "a", "text": "x\ny"}, {"type": "delta", "id": "b", "text": "é"},
                {"type": "done", "id": "a"}]

    async def main() -> list[bytes]:
        ours, theirs = socket.socketpair()
        sock = CountingSocket(fileno=ours.detach())
        sock.writes = []
        got: list[bytes] = []
        closed = asyncio.get_running_loop().create_future()
        transport, _ = await asyncio.get_running_loop().create_unix_connection(
            lambda: _Lines(got.append, lambda: closed.set_result(None)), sock=theirs)
        channel = Channel(sock)
        channel.send_all(messages)
        channel.send_all([])  # nothing to say: no write at all
        assert len(sock.writes) == 1
        sock.shutdown(socket.SHUT_WR)  # EOF for the reader (the channel's own reader keeps the fd open)
        await closed
        sock.close()
        transport.close()
        return got

    assert [json.loads(line) for line in asyncio.run(main())] == messages


TEXTS = ["", "Hi", ' "quoted" \\ back', "new\nline\ttab\r", "\x00\x01\x1f", "é ünï 中文 😀", "</script>"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_template_renders_what_the_plain_serializer_renders(text):
    def chunk(value: str) -> dict:
        return {"id": "cmpl-1", "model": "smollm2:135m", "choices": [{"text": value, "index": 0, "logprobs": None}]}

    assert Template(sse(chunk(HOLE)))(text) == sse(chunk(text))
    assert Template(sse(chunk(HOLE), event="delta"))(text) == sse(chunk(text), event="delta")
    two = Template(ndjson({"created_at": HOLE, "response": HOLE, "done": False}))
    assert two("2026-11-30T12:00:00Z", text) == ndjson({"created_at": "2026-11-30T12:00:00Z", "response": text,
                                                        "done": False})


@given(st.text())
def test_a_template_matches_for_any_text(text):
    assert Template(sse({"delta": {"content": HOLE}}))(text) == sse({"delta": {"content": text}})


def test_a_template_refuses_the_wrong_number_of_strings():
    with pytest.raises(ValueError, match="1 holes, got 2"):
        Template(sse({"text": HOLE}))("a", "b")
