"""The model store a command works with, behind one interface: this home's (`LocalStore`, the store
package) or a server's own (`ServerStore`, over the Ollama API through the client). `open_store`
picks one as cli/targets.py decides; the commands (store_commands.py) print either's answers the
same way.

Both answer in the same types: `Listed` (a row of `list`), `Shown` (what `show` prints) and `Made`
(a model `pull` or `create` made). `json` in each is what `--json` prints, which says more for this
home's models (paths, defaults, the whole GGUF header) than a server tells.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from localrun.cli.format import first_line, human_size
from localrun.errors import AuthError, DaemonUnavailable, LocalrunError, ModelNotFound, Overloaded, UsageError

if TYPE_CHECKING:
    from localrun.api_types import ListedModel, ShowResponse
    from localrun.client import Address, Client
    from localrun.store import Modelfile

T = TypeVar("T")
Progress = Callable[[Any], None]  # a store's PullProgress or a server's PullStatus: status, total, completed


@dataclass(slots=True)
class Listed:
    """One model of `list`."""

    name: str
    digest: str = ""  # "sha256:<hex>"; "" for a model another server answers for
    size: int = 0
    quantization: str = ""
    parameter_size: str = ""
    modified: datetime | None = None
    where: str = ""  # for a model another server answers for: "backend:NAME"
    json: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Shown:
    """What `show` prints. A part the server did not tell is None (`show --template` then says so).
    `facts` is a function: this home's reads the settings (the context a load gets), which only the
    plain `show` prints."""

    facts: Callable[[], list[tuple[str, str]]]
    architecture: str
    chat_template: str
    template: str | None
    license: str | None  # as `show --license` prints it
    metadata: dict[str, Any] | None
    modelfile: str | None
    json: dict[str, Any]
    special_tokens: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)  # what its Modelfile set
    system: str = ""


@dataclass(slots=True)
class Made:
    """A model `pull` or `create` made: its name, and either its id and size here or the server's address."""

    name: str
    short_id: str = ""
    size: int = 0
    host: str = ""
    json: dict[str, Any] = field(default_factory=dict)


class ModelStore(Protocol):
    """What the model commands ask of a store; errors are LocalrunErrors that name the model or the server."""

    where: str  # "" for this home's store, else the server's address

    def list(self) -> list[Listed]: ...
    def show(self, model: str) -> Shown: ...
    def pull(self, model: str, link: bool, progress: Progress | None) -> Made: ...
    def remove(self, model: str) -> None: ...
    def copy(self, source: str, destination: str, force: bool) -> str: ...
    def create(self, name: str, recipe: Modelfile, folder: Path, progress: Progress | None,
               quantize: str | None = None) -> Made: ...


def open_store(host: str | None, command: str, daemon: bool = False) -> ModelStore:
    """The store `--host` (or LOCALRUN_HOST) names for `command`: a server's own, or this home's. With
    `daemon`, this home's running daemon does the work when there is one (`rm` unloads what it removes)."""
    from localrun.cli import targets

    target = targets.resolve(host)
    if not target.local or (daemon and target.up):
        return ServerStore(target.address, command)
    return LocalStore()


class LocalStore:
    """This home's store, read and changed in this process: no daemon needed."""

    where = ""

    def __init__(self) -> None:
        from localrun.store import Store

        self.store = Store()

    def list(self) -> list[Listed]:
        rows = [Listed(m.name, m.digest, m.size, m.quantization, m.parameter_size, m.modified, json=m.to_dict())
                for m in self.store.list()]
        return rows + [Listed(name, where=f"backend:{backend}", json={"name": name, "backend": backend})
                       for name, backend in _declared_upstream_models()]

    def show(self, model: str) -> Shown:
        from localrun.store import modelfile_of

        resolved, info = self.store.resolve(model), self.store.show(model)

        def facts() -> list[tuple[str, str]]:
            rows = [("name", resolved.name), ("architecture", info.architecture),
                    ("parameters", info.parameter_size), ("quantization", info.quantization),
                    ("context length", str(info.context_length)), ("embedding length", str(info.embedding_length)),
                    ("license", info.license or "-"), ("loads with", _context_in_use(resolved)),
                    ("size", human_size(resolved.size)), ("digest", resolved.digest), ("source", resolved.source)]
            if resolved.origin:  # made by `localrun quantize`
                origin = resolved.origin
                rows.append(("quantized from", f"{origin['model']} ({origin['digest'].removeprefix('sha256:')[:12]})"))
            return rows

        template = resolved.template or info.chat_template
        return Shown(facts, info.architecture, template, template,
                     resolved.modelfile_license or info.license or "(no license in the GGUF metadata)",
                     info.metadata, modelfile_of(resolved, info), {**resolved.to_dict(), **info.to_dict()},
                     info.special_tokens, resolved.defaults, resolved.system)

    def pull(self, model: str, link: bool, progress: Progress | None) -> Made:
        result = self.store.pull(model, link=link, progress=progress)
        return Made(result.name, result.short_id, result.size, json=result.to_dict())

    def remove(self, model: str) -> None:
        self.store.remove(model)

    def copy(self, source: str, destination: str, force: bool) -> str:
        return self.store.copy(source, destination, force=force).name

    def create(self, name: str, recipe: Modelfile, folder: Path, progress: Progress | None,
               quantize: str | None = None) -> Made:
        made = self.store.create(name, recipe, folder=folder, quantize=quantize, progress=progress)
        return Made(made.name, made.short_id, made.size, json=made.to_dict())


class ServerStore:
    """A server's own store (Ollama or localrun) over the Ollama API: /api/tags, /api/show, /api/pull,
    /api/delete, /api/copy, /api/create."""

    def __init__(self, address: Address, command: str) -> None:
        self.address, self.command = address, command
        self.where = address.base_url

    def list(self) -> list[Listed]:
        """The server's /api/tags; from a server without the Ollama API (vLLM, llama-server), the names
        its /v1/models lists, with nothing else known."""
        try:
            return [self._listed(tag) for tag in self._ask(lambda client: client.tags())]
        except NoOllamaApi:
            names = self._openai_names()
            if names is None:
                raise
            return [Listed(name, json={"name": name, "host": self.where}) for name in names]

    def _openai_names(self) -> list[str] | None:
        """The models an OpenAI-style server lists at /v1/models; None when it has no such list."""
        from localrun.client import Client

        with Client.from_host(self.where) as client:
            try:
                return client.models()
            except LocalrunError:
                return None

    def _listed(self, tag: ListedModel) -> Listed:
        digest = f"sha256:{tag.digest}" if tag.digest else ""
        json = {"name": tag.name, "digest": digest, "size": tag.size, "modified": tag.modified_at,
                "architecture": tag.details.family, "parameter_size": tag.details.parameter_size,
                "quantization": tag.details.quantization_level, "host": self.where}
        return Listed(tag.name, digest, tag.size, tag.details.quantization_level, tag.details.parameter_size,
                      tag.modified, tag.remote_host or "", json)

    def show(self, model: str) -> Shown:
        def ask(client: Client) -> tuple[ShowResponse, ListedModel | None]:
            shown = client.show(model)
            try:  # size and digest are in /api/tags only
                return shown, _find_tag(client.tags(), model, shown)
            except LocalrunError:
                return shown, None

        shown, tag = self._ask(ask)
        listed = self._listed(tag) if tag else Listed(model)
        facts = {"name": listed.name, "digest": listed.digest, "size": listed.size,
                 "modified": shown.modified_at or listed.json.get("modified", ""),
                 "architecture": shown.architecture, "parameters": shown.parameter_count,
                 "parameter_size": shown.details.parameter_size, "quantization": shown.details.quantization_level,
                 "context_length": shown.context_length, "embedding_length": shown.embedding_length,
                 "license": shown.license or "", "chat_template": shown.template or "",
                 "metadata": shown.model_info or {}, "host": self.where}
        rows = [("name", listed.name), ("architecture", shown.architecture or "-"),
                ("parameters", shown.details.parameter_size or "-"),
                ("quantization", shown.details.quantization_level or "-"),
                ("context length", str(shown.context_length or "-")),
                ("embedding length", str(shown.embedding_length or "-")),
                ("license", first_line(shown.license or "") or "-"),
                ("size", human_size(listed.size) if listed.size else "-"), ("digest", listed.digest or "-"),
                ("server", self.where)]
        license_ = None if shown.license is None else shown.license or "(no license in the server's answer)"
        return Shown(lambda: rows, shown.architecture, shown.template or "", shown.template, license_, shown.model_info,
                     shown.modelfile, facts)

    def pull(self, model: str, link: bool, progress: Progress | None) -> Made:
        """The server pulls `model` itself; a GGUF file here is uploaded to it instead (as `create` does
        for `FROM ./file.gguf`), under the name a pull here would give it."""
        from localrun.cli import targets
        from localrun.store import parse_reference

        if link:
            raise UsageError("--link works with this home's store only, not with a server's (--host)")
        reference = parse_reference(model)
        if reference.kind == "path":
            upload = _Upload.of(Path(reference.path).expanduser(), progress)
            model = str(reference.name)
            self._ask(lambda client: client.create(model, {"files": upload.send(client)}))
        else:
            self._ask(lambda client: targets.pull_on_server(client, model, progress or (lambda status: None)))
        return Made(model, host=self.where, json={"name": model, "host": self.where})

    def remove(self, model: str) -> None:
        self._ask(lambda client: client.delete(model))

    def copy(self, source: str, destination: str, force: bool) -> str:
        self._ask(lambda client: client.copy(source, destination))
        return destination

    def create(self, name: str, recipe: Modelfile, folder: Path, progress: Progress | None,
               quantize: str | None = None) -> Made:
        """As `ollama create`: a FROM that is a GGUF file here is uploaded to the server first (unless
        it has the file already) and named in `files`; any other FROM names a model there."""
        from localrun.store import parse_reference

        given = {k: getattr(recipe, k) for k in ("system", "template", "license") if getattr(recipe, k) is not None}
        fields = {"parameters": recipe.parameters, "messages": list(recipe.messages), **given,
                  **({"quantize": quantize} if quantize else {})}
        reference = parse_reference(recipe.base)
        upload = _Upload.of(folder / Path(reference.path).expanduser(), progress) if reference.kind == "path" else None

        def create(client: Client) -> None:
            if upload is not None:
                fields["files"] = upload.send(client)
            else:
                fields["from"] = recipe.base
            client.create(name, fields)

        self._ask(create)
        return Made(name, host=self.where)

    def _ask(self, call: Callable[[Client], T]) -> T:
        """`call(client)` on the server. When it fails and the server does not speak the Ollama API at all
        (vLLM, llama-server: 404 on /api/version too), one error line says so instead."""
        from localrun.client import Client

        with Client.from_host(self.where) as client:
            try:
                return call(client)
            except (AuthError, DaemonUnavailable, Overloaded):
                raise
            except LocalrunError:
                if _speaks_ollama(client):
                    raise  # the server's own answer: a model it lacks, a bad name
        raise NoOllamaApi(f"{self.where} does not speak the Ollama API (no /api/version): `localrun "
                          f"{self.command}` on a server needs one with a store of its own (Ollama or localrun)")


@dataclass(frozen=True, slots=True)
class _Upload:
    """A GGUF file here that `create --host` sends to the server's /api/blobs, named by its sha256."""

    path: Path
    size: int
    digest: str
    emit: Progress

    @classmethod
    def of(cls, path: Path, progress: Progress | None) -> _Upload:
        """Hash the file (the upload's URL names its digest); a missing file fails here, before any request."""
        from localrun.store import PullProgress
        from localrun.store.digests import hash_file

        emit = progress or (lambda event: None)
        if not path.is_file():
            raise ModelNotFound(f"FROM {path}: no such file")
        try:
            size = path.stat().st_size
            digest = hash_file(path, lambda done: emit(PullProgress(f"hashing {path.name[:40]}", "", size, done)))
        except OSError as e:
            raise LocalrunError(f"FROM {path}: {e.strerror or e}") from None
        return cls(path, size, digest, emit)

    def send(self, client: Client) -> dict[str, str]:
        """Upload the file unless the server has it already; /api/create's `files` for it."""
        if not client.has_blob(self.digest):
            client.push_blob(self.digest, self._chunks(), self.size)
        return {self.path.name: self.digest}

    def _chunks(self) -> Iterator[bytes]:
        from localrun.store import PullProgress
        from localrun.store.digests import COPY_CHUNK

        sent = 0
        with open(self.path, "rb") as f:
            while chunk := f.read(COPY_CHUNK):
                sent += len(chunk)
                self.emit(PullProgress(f"uploading {self.path.name[:40]}", self.digest, self.size, sent))
                yield chunk


class NoOllamaApi(LocalrunError):
    """The server a model command went to has no store of its own to ask."""


def _speaks_ollama(client: Client) -> bool:
    try:
        client.version()
    except LocalrunError:
        return False
    return True


def _find_tag(tags: list[ListedModel], model: str, shown: ShowResponse) -> ListedModel | None:
    """The /api/tags entry of `model`: by name (Ollama adds `:latest`), else by the blob digest in the
    Modelfile's FROM line (localrun's tags carry the blob digest; its names resolve catalogue aliases)."""
    import re

    for tag in tags:
        if tag.name in (model, f"{model}:latest"):
            return tag
    found = re.search(r"^FROM .*sha256[-:]([0-9a-f]{64})\s*$", shown.modelfile or "", re.MULTILINE)
    if found:
        for tag in tags:
            if tag.digest == found.group(1):
                return tag
    return None


def _declared_upstream_models() -> list[tuple[str, str]]:
    """(model, backend) for the models backends.toml names; a running daemon's /api/tags (`list --host`)
    also shows those it discovered from the upstreams' /v1/models."""
    from localrun.upstream import backends

    return [(model, b.name) for b in backends.load().backends.values() for model in b.models]


def _context_in_use(model: Any) -> str:
    """The context a load of `model` gets with this environment's settings, and why."""
    from localrun.config import Settings
    from localrun.memory import context_for

    settings = Settings.from_env()
    ctx, why = context_for(model, model.defaults.get("num_ctx"), settings)
    why = "its Modelfile's num_ctx" if why == "num_ctx" else why
    return f"{ctx} tokens per request x {settings.engine.parallel} slots ({why})"


__all__ = ["LocalStore", "Listed", "Made", "ModelStore", "ServerStore", "Shown", "open_store"]
