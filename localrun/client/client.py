"""`Client`: typed methods over the daemon's HTTP API (httpx, sync).

Generation goes through the OpenAI-compatible routes so the same client works against any
OpenAI-compatible server; `ps()` and `show()` use the Ollama-native routes only localrun (and
Ollama) have. Every HTTP failure becomes a LocalrunError with one readable line; a streamed answer
is a `TextStream` that yields text deltas and keeps the final usage and timings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from localrun.api_types import ListedModel, RunningModel, ScoreResponse, ShowResponse
from localrun.client.address import parse_address
from localrun.ops import PerplexityResult
from localrun.client.types import Completion, GenerateOptions, PullStatus, Timings, Usage
from localrun.errors import (AuthError, DaemonUnavailable, InvalidRequest, LocalrunError, ModelNotFound,
                             Overloaded)

Messages = list[dict[str, Any]]
THINKING, ANSWER = "thinking", "answer"  # what a streamed piece is (TextStream.pieces)
REQUEST_ID = "x-request-id"  # the daemon's id of a request, as its access log names it
_QUICK = httpx.Timeout(10.0, connect=5.0)
_GENERATE = httpx.Timeout(None, connect=5.0)
# /api/show parses a model file the daemon has not cached yet (seconds for a big vocabulary), on cores a
# model being loaded keeps busy: chat's /show info must not give up after _QUICK's 10 s.
_LOOKUP = httpx.Timeout(120.0, connect=5.0)


class Client:
    """One daemon (or OpenAI-compatible server) at `base_url`; `api_key` is sent as a Bearer token."""

    def __init__(self, base_url: str, api_key: str = "", transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        # Plain http needs no TLS context; building one (the CA bundle) costs ~0.2 s of every CLI call.
        verify = not self.base_url.startswith("http://")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, transport=transport, timeout=_QUICK,
                                  verify=verify)

    @classmethod
    def from_host(cls, host: str | None = None) -> Client:
        """From `--host` (or LOCALRUN_HOST when None) and LOCALRUN_API_KEY's first key."""
        from localrun.config import read

        keys = read("LOCALRUN_API_KEY")
        return cls(parse_address(host or read("LOCALRUN_HOST")).base_url, keys[0] if keys else "")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- small routes ---------------------------------------------------------------------------

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        return self._json("GET", "/health", timeout=timeout)

    def version(self) -> str:
        return str(self._json("GET", "/api/version").get("version", ""))

    def ps(self) -> list[RunningModel]:
        return [RunningModel.from_dict(m) for m in self._json("GET", "/api/ps").get("models", [])]

    def models(self) -> list[str]:
        return [m["id"] for m in self._json("GET", "/v1/models").get("data", [])]

    def serves_web_page(self) -> bool:
        """Whether GET / answers with the chat page (no: `serve --no-ui`, or another kind of server)."""
        try:
            response = self._send("GET", "/", headers={"Accept": "text/html"})  # as a browser asks
        except DaemonUnavailable:
            raise
        except LocalrunError:
            return False
        return response.headers.get("content-type", "").startswith("text/html")

    def show(self, model: str) -> ShowResponse:
        """Ollama's `/api/show`: details, parameters, template, model_info."""
        shown = self._json("POST", "/api/show", json={"model": model}, timeout=_LOOKUP)
        if not isinstance(shown, dict):
            raise LocalrunError(f"{self.base_url}/api/show answered with something that is not an object")
        return ShowResponse.from_dict(shown)

    def trained_context(self, model: str) -> int | None:
        """The context length `model` was trained for, from `/api/show`; None when the server does not say."""
        return self.show(model).context_length or None

    def tags(self) -> list[ListedModel]:
        """Ollama's `/api/tags`: the models in the server's own store as it describes them (name, size,
        digest, modified_at, details)."""
        data = self._json("GET", "/api/tags")
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, list):
            raise LocalrunError(f"{self.base_url}/api/tags answered without a list of models")
        return [ListedModel.from_dict(m) for m in models if isinstance(m, dict)]

    def copy(self, source: str, destination: str) -> None:
        """Ollama's `/api/copy`: the server gives one of its models a second name."""
        self._send("POST", "/api/copy", json={"source": source, "destination": destination})

    def create(self, model: str, fields: dict[str, Any]) -> None:
        """Ollama's `/api/create`: the server makes `model` from the Modelfile's `fields` (from or files,
        parameters, system, template, messages, license, quantize). Not streamed, and no read timeout:
        a quantization takes a while."""
        self._send("POST", "/api/create", json={**fields, "model": model, "stream": False}, timeout=_GENERATE)

    def has_blob(self, digest: str) -> bool:
        """Ollama's `HEAD /api/blobs/<digest>`: whether the server has the file with this sha256."""
        try:
            self._send("HEAD", f"/api/blobs/{digest}")
        except ModelNotFound:
            return False
        return True

    def push_blob(self, digest: str, chunks: Iterable[bytes], size: int) -> None:
        """Ollama's `POST /api/blobs/<digest>`: send a file of `size` bytes, which the server verifies
        against `digest` before it keeps it. No read timeout: a big file takes a while to check."""
        self._send("POST", f"/api/blobs/{digest}", content=chunks, headers={"Content-Length": str(size)},
                   timeout=_GENERATE)

    def pull(self, model: str) -> Iterator[PullStatus]:
        """Ollama's streamed `/api/pull`: the server fetches `model` into its own store. Yields its progress;
        an error it reports after streaming began is raised. No read timeout: big files take a while."""
        response = self._send("POST", "/api/pull", json={"model": model, "stream": True}, timeout=_GENERATE,
                              stream=True)
        try:
            for line in response.iter_lines():
                data = json.loads(line) if line.strip() else {}
                if "error" in data:
                    raise LocalrunError(str(data["error"]))
                if data:
                    yield PullStatus.from_dict(data)
        except httpx.TransportError as e:
            raise DaemonUnavailable(f"the connection broke during the pull: {e}") from None
        except ValueError:
            raise LocalrunError(f"{self.base_url}/api/pull sent a line that is not JSON") from None
        finally:
            response.close()

    def delete(self, model: str) -> None:
        """Ollama's `DELETE /api/delete`: the server removes the model (a localrun daemon also unloads it)."""
        self._send("DELETE", "/api/delete", json={"model": model})

    def load(self, model: str, num_ctx: int | None = None) -> None:
        """Ollama's empty `/api/generate`: the server loads `model` now (with `num_ctx` tokens of context
        per request when given; a loaded runner with another context is reloaded when idle)."""
        options = {"num_ctx": num_ctx} if num_ctx else {}
        self._send("POST", "/api/generate", json={"model": model, "options": options, "stream": False},
                   timeout=_GENERATE)

    def unload(self, model: str) -> None:
        """Ollama's empty `/api/generate` with keep_alive 0: the server unloads `model` now when it is idle,
        else when its requests in flight have finished."""
        self._send("POST", "/api/generate", json={"model": model, "keep_alive": 0})

    def perplexity(self, model: str, text: str, ctx: int = 512, batch: int = 2048) -> PerplexityResult:
        """`/api/perplexity` (localrun only): perplexity, nll, tokens, scored, chunks, ctx, seconds, the
        runner's answer as the server passes it on. No read timeout: a long text takes as long as evaluating it."""
        body = {"model": model, "text": text, "ctx": ctx, "batch": batch}
        answer = self._json("POST", "/api/perplexity", json=body, timeout=_GENERATE)
        try:
            return PerplexityResult.from_dict(answer)
        except TypeError:
            raise LocalrunError(f"{self.base_url}/api/perplexity answered without a perplexity") from None

    def score(self, model: str, prompt: str, options: list[str], normalize: str = "sum") -> ScoreResponse:
        """`/v1/score` (localrun only): each option's exact log-probability after the prompt."""
        body = {"model": model, "prompt": prompt, "options": options, "normalize": normalize}
        return ScoreResponse.from_dict(self._json("POST", "/v1/score", json=body, timeout=_GENERATE))

    # -- generation -----------------------------------------------------------------------------

    def chat(self, model: str, messages: Messages, options: GenerateOptions | None = None,
             stream: bool = False) -> Completion | TextStream:
        body = _body(model, options, stream, messages=messages)
        return self._generate("/v1/chat/completions", body, stream, chat=True)

    def complete(self, model: str, prompt: str, options: GenerateOptions | None = None,
                 stream: bool = False) -> Completion | TextStream:
        body = _body(model, options, stream, prompt=prompt)
        return self._generate("/v1/completions", body, stream, chat=False)

    def _generate(self, path: str, body: dict[str, Any], stream: bool, chat: bool) -> Completion | TextStream:
        if stream:
            return TextStream(self._send("POST", path, json=body, timeout=_GENERATE, stream=True), chat)
        response = self._send("POST", path, json=body, timeout=_GENERATE)
        completion = _completion(self._decode(response, path), chat)
        completion.request_id = response.headers.get(REQUEST_ID, "")
        return completion

    # -- plumbing -------------------------------------------------------------------------------

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._decode(self._send(method, path, **kwargs), path)

    def _decode(self, response: httpx.Response, path: str) -> dict[str, Any]:
        try:
            return response.json()
        except ValueError:
            raise LocalrunError(f"{self.base_url}{path} answered with something that is not JSON") from None

    def _send(self, method: str, path: str, timeout: Any = None, stream: bool = False,
              **kwargs: Any) -> httpx.Response:
        request = self._http.build_request(method, path, timeout=timeout or _QUICK, **kwargs)
        try:
            response = self._http.send(request, stream=stream)
        except httpx.TimeoutException:
            raise DaemonUnavailable(f"{self.base_url} did not answer in time") from None
        except httpx.TransportError as e:
            raise DaemonUnavailable(f"cannot reach {self.base_url}: {e}") from None
        if response.is_error:
            response.read()
            response.close()
            raise error_from_response(response)
        return response


def _body(model: str, options: GenerateOptions | None, stream: bool, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, **fields, **(options or GenerateOptions()).to_body()}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _completion(data: dict[str, Any], chat: bool) -> Completion:
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    text = message.get("content") if chat else choice.get("text")
    return Completion(text or "", data.get("model", ""), choice.get("finish_reason"),
                      Usage.from_json(data.get("usage")), Timings.from_json(data.get("timings")), data,
                      thinking=_reasoning(message) if chat else "")


def error_from_response(response: httpx.Response) -> LocalrunError:
    """The LocalrunError for an HTTP error status, with the server's own message when it sent one."""
    message = _error_message(response) or f"HTTP {response.status_code} from {response.request.url}"
    status = response.status_code
    if status == 503:
        retry = response.headers.get("retry-after", "1")
        return Overloaded(message, int(retry) if retry.isdigit() else 1)
    if status in (401, 403):
        return AuthError(message + ("" if "key" in message.lower() else " (set LOCALRUN_API_KEY)"))
    if status == 404:
        return ModelNotFound(message)
    if 400 <= status < 500:
        return InvalidRequest(message)
    return LocalrunError(message)


def _error_message(response: httpx.Response) -> str:
    """OpenAI's {"error": {"message"}}, Ollama's {"error": "..."} or FastAPI's {"detail": ...}."""
    try:
        data = response.json()
    except ValueError:  # plain text as one line; an HTML error page says nothing the status does not
        text = response.text.strip()
        return "" if text.startswith("<") else " ".join(text.split())[:200]
    if not isinstance(data, dict):
        return ""
    error = data.get("error", data.get("detail", ""))
    if isinstance(error, dict):
        error = error.get("message", "")
    return str(error).strip()


def _reasoning(message: dict[str, Any]) -> str:
    """A message's or delta's thinking: `reasoning_content` (localrun, llama-server, DeepSeek) or
    `reasoning` (vLLM, OpenRouter)."""
    return message.get("reasoning_content") or message.get("reasoning") or ""


class TextStream:
    """An SSE answer: iterate for text deltas, or `pieces()` for the thinking too; afterwards
    `completion` has the text, the thinking, usage and timings.

    Closing it early (or leaving a `with` block) drops the connection, which cancels the generation
    on the daemon: that is how Ctrl-C stops an answer.
    """

    def __init__(self, response: httpx.Response, chat: bool) -> None:
        self._response = response
        self._chat = chat
        self._parts: list[str] = []
        self._thought: list[str] = []
        self.completion = Completion("", request_id=response.headers.get(REQUEST_ID, ""))

    def __enter__(self) -> TextStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._response.close()

    def __iter__(self) -> Iterator[str]:
        return (text for kind, text in self.pieces() if kind == ANSWER)

    def pieces(self) -> Iterator[tuple[str, str]]:
        """(THINKING or ANSWER, text) as they stream, thinking first as models write it."""
        try:
            for chunk in _events(self._response):
                thought, delta = self._absorb(chunk)
                if thought:
                    yield THINKING, thought
                if delta:
                    yield ANSWER, delta
        except httpx.TransportError as e:
            raise DaemonUnavailable(f"the connection broke during the answer: {e}") from None
        finally:
            self.close()
        self.completion.text = "".join(self._parts)
        self.completion.thinking = "".join(self._thought)

    def _absorb(self, chunk: dict[str, Any]) -> tuple[str, str]:
        if "error" in chunk:
            error = chunk["error"]
            raise LocalrunError(error.get("message", str(error)) if isinstance(error, dict) else str(error))
        c = self.completion
        c.model = chunk.get("model", c.model)
        c.raw = chunk
        c.usage = Usage.from_json(chunk.get("usage")) or c.usage
        c.timings = Timings.from_json(chunk.get("timings")) or c.timings
        thought, delta = "", ""
        for choice in chunk.get("choices") or []:
            c.finish_reason = choice.get("finish_reason") or c.finish_reason
            delta += ((choice.get("delta") or {}).get("content") if self._chat else choice.get("text")) or ""
            thought += _reasoning(choice.get("delta") or {}) if self._chat else ""
        self._parts.append(delta)
        self._thought.append(thought)
        return thought, delta


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON objects of an SSE stream's `data:` lines, up to `[DONE]`."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except ValueError:
            raise LocalrunError(f"the server sent a malformed stream event: {data[:80]!r}") from None


__all__ = ["Client", "TextStream", "error_from_response"]
