"""The Store: pull, resolve, list, show, remove and copy models in one content-addressed root.

Pull is the only writer of blobs. It takes a file lock per name (so two pulls of one model, in
two terminals or in the CLI and the daemon, do the work once: the second waits and finds the
manifest) and one per download (so two names for the same file share a download). A blob is
verified (sha256 and a full GGUF parse) in `partial/` before it is renamed into `blobs/`, and
its manifest is written after it; `remove` collects unreferenced blobs under a store-wide lock
that pull also holds while it installs a blob and writes its manifest, so collection never sees
a blob between the two.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from localrun import config, paths
from localrun.errors import ChecksumMismatch, InvalidRequest, LocalrunError, ModelNotFound, StoreError, UsageError
from localrun.store import infocache, locks
from localrun.store.catalogue import Entry, load_catalogue
from localrun.store.download import Download, Policy
from localrun.store.ggufinfo import read_info
from localrun.store.hub import hf_lookup
from localrun.store.digests import hash_file
from localrun.store.layout import Layout, digest_key, install_blob, os_errors, url_key
from localrun.store.manifests import (Link, Manifest, iter_manifests, read_manifest, referenced_digests,
                                      remove_manifest, write_manifest)
from localrun.store.model import Model, ModelInfo, PullProgress
from localrun.store.modelfile import Modelfile
from localrun.store.names import Name, Reference, parse_name, parse_reference
from localrun.store.quantizing import requantize_warning, requantizing, run_quantizer
from localrun.store.scratch import scratch_file, sweep
from localrun.store.sources import Remote, catalogue_remote, rewrite_host
from localrun.store.uploads import BlobUpload, blob_digest

Progress = Callable[[PullProgress], None]


class Store:
    """A model store rooted at `root` (default: `localrun.paths.models_dir()`)."""

    def __init__(self, root: Path | None = None, *, policy: Policy | None = None) -> None:
        self.layout = Layout(Path(root) if root else paths.models_dir())
        self.policy = policy or Policy()
        self._creating = 0  # creates under way: while one builds its model, no file is collected
        self._creating_lock = threading.Lock()

    # --- queries -------------------------------------------------------------------------------

    def resolve(self, ref: str) -> Model:
        """The present model `ref` names, ready to load (a linked file is re-checked first)."""
        manifest = self._find(parse_reference(ref))
        if manifest is None:
            raise self._not_pulled(ref)
        return self._model(manifest, check=True)

    def list(self) -> list[Model]:
        return sorted((self._model(m) for m in iter_manifests(self.layout)), key=lambda m: m.name)

    def show(self, ref: str) -> ModelInfo:
        model = self.resolve(ref)
        return infocache.model_info(self.layout, model.digest, model.path, model.name)

    # --- changes -------------------------------------------------------------------------------

    def pull(self, ref: str, *, progress: Progress | None = None, link: bool = False) -> Model:
        """Make `ref` present: a no-op when it already is, else fetch, verify and record it."""
        emit = progress or (lambda event: None)
        reference = parse_reference(ref)
        if link and reference.kind != "path":
            raise UsageError("--link works only with a local file path")
        emit(PullProgress("pulling manifest"))
        name_lock = "name-" + _short_hash(str(self._canonical(reference)))
        with os_errors(), self._lock(name_lock, lambda: emit(PullProgress("waiting for another pull of it"))):
            manifest = self._present(reference)
            if manifest is None:
                manifest = self._fetch(reference, link, emit)
        emit(PullProgress("success", manifest.digest))
        return self._model(manifest)

    def import_file(self, path: Path, name: str, *, source: str, origin: dict | None = None,
                    defaults: dict | None = None, progress: Progress | None = None) -> Model:
        """Record a GGUF file made on this machine under `name`, with `origin` saying what it was made
        from. A scratch file (store/scratch.py) is verified and moved in; any other file is copied."""
        target = _Target(parse_name(name), source, progress or (lambda event: None), defaults or {}, origin or {})
        path = Path(path)
        with os_errors(), self._lock("name-" + _short_hash(str(target.name))):
            if path.parent != self.layout.partial:
                manifest = self._import(path, "", target)
            else:
                digest = hash_file(path)
                manifest = self._commit(target, digest, self._validate(path, digest, target), path)
        return self._model(manifest)

    def has_blob(self, digest: str) -> bool:
        """Whether the file with this digest is in `blobs/` (Ollama's `HEAD /api/blobs/<digest>`)."""
        return self.layout.blob(blob_digest(digest)).is_file()

    def receive_blob(self, digest: str, size: int = 0) -> BlobUpload:
        """A writer for a file of `size` bytes (0: not said) a client sends under `digest`; its `finish`
        verifies it and moves it in. Until a model names it (`create` with `upload`), the next
        collection (`rm`) may delete it, as Ollama prunes unused layers."""
        with os_errors():
            return BlobUpload(self.layout, blob_digest(digest), self._install_upload, size)

    def _install_upload(self, partial: Path, digest: str, info: ModelInfo) -> None:
        with os_errors(), self._lock("gc"):
            install_blob(self.layout, partial, digest)
            infocache.save(self.layout, digest, info)

    def quantize(self, source: Model, dst: str, type_: str, on_event: Callable[[dict], None] | None = None) -> Model:
        """Make `dst` by quantizing `source` (a model of this store) to `type_` with llama.cpp's quantizer
        (store/quantizing.py); `on_event` gets its events. The new model keeps the source's defaults, and
        its manifest says what it was made from (`origin`)."""
        with scratch_file(self.layout, "quantize") as partial:
            done = run_quantizer(source, partial, type_, on_event or (lambda event: None))
            return self.import_file(partial, dst, source=f"quantize:{source.name}",
                                    origin={"model": source.name, "digest": source.digest, "type": done["type"]},
                                    defaults=source.defaults)

    def check_unused(self, name: str) -> None:
        """Refuse a name that already names a model, before work that would replace it (quantize's
        result); the caller's --force skips this."""
        old = read_manifest(self.layout, parse_name(name))
        if old is not None:
            raise _taken(old)

    def remove(self, ref: str) -> list[str]:
        """Delete a model's manifest and every blob no manifest references any more. Returns the
        other names that still use its file (its runner must stay loaded for them)."""
        manifest = self._find(parse_reference(ref))
        if manifest is None:
            raise self._not_pulled(ref, pull_hint=False)
        with os_errors(), self._lock("gc"):
            remove_manifest(self.layout, manifest.name)
            self._collect_garbage()
            return [str(m.name) for m in iter_manifests(self.layout) if m.digest == manifest.digest]

    def copy(self, src: str, dst: str, *, force: bool = False) -> Model:
        """Give a present model a second name; both point at the same blob. A name that already points
        at another file is replaced only with `force` (its blob is collected when no name uses it)."""
        manifest = self._find(parse_reference(src))
        if manifest is None:
            raise self._not_pulled(src)
        return self._write_named(replace(manifest, name=parse_name(dst), modified=_now()), force)

    def create(self, name: str, modelfile: Modelfile, *, folder: Path | None = None,
               upload: tuple[str, str] | None = None, quantize: str | None = None,
               progress: Progress | None = None) -> Model:
        """Make `name` from a Modelfile: its FROM model (pulled when missing) or GGUF file (imported; a
        relative path is read from `folder`), or the `upload` (file name, digest) a client sent to
        `receive_blob`, with the Modelfile's settings over the base's. The new model shares the base's
        blob (only its manifest is new), or with `quantize` (a type: Q4_K_M, Q8_0, ...) has a file of its
        own, the base's quantized. As with Ollama, creating a name that exists replaces it: that is how
        a model's Modelfile is edited."""
        report = progress or (lambda event: None)

        def emit(event: PullProgress) -> None:  # the base's pull reports no success: one, at the end
            if event.status != "success":
                report(event)

        named = parse_name(name)
        previous = read_manifest(self.layout, named)
        with self._collection_deferred():
            try:
                base = self._uploaded(*upload, name, emit) if upload else self._base(modelfile.base, name, folder, emit)
                if quantize:
                    base = self._quantized(base, name, quantize, emit)
            except BaseException:
                self._put_back(previous, named)
                raise
        made = replace(base, name=named, modified=_now(),
                       defaults={**base.defaults, **modelfile.parameters},
                       system=_given(modelfile.system, base.system), template=_given(modelfile.template, base.template),
                       messages=list(modelfile.messages) or base.messages,
                       license=_given(modelfile.license, base.license))
        emit(PullProgress(f"using existing layer {made.digest}", made.digest))
        emit(PullProgress("writing manifest", made.digest))
        model = self._write_named(made, force=True)
        if previous is not None and previous.digest != made.digest:
            with os_errors(), self._lock("gc"):
                self._collect_garbage()  # the file the name had, unless another name uses it
        report(PullProgress("success", made.digest))
        return model

    @contextlib.contextmanager
    def _collection_deferred(self) -> Iterator[None]:
        """A create records its base under the name first (an imported GGUF file, an upload, a
        quantization): the file the name had must outlive that, for `_put_back` if the create fails."""
        with self._creating_lock:
            self._creating += 1
        try:
            yield
        finally:
            with self._creating_lock:
                self._creating -= 1

    def _put_back(self, previous: Manifest | None, name: Name) -> None:
        """After a failed create, `name` is as it was: the file it had imported under the name (a GGUF
        file, an upload) is unnamed again, and stays until the next collection."""
        with os_errors(), self._lock("gc"):
            if read_manifest(self.layout, name) == previous:
                return
            if previous is not None:
                write_manifest(self.layout, previous)
            elif self.layout.manifest(name).exists():
                remove_manifest(self.layout, name)

    def _base(self, ref: str, name: str, folder: Path | None, emit: Progress) -> Manifest:
        """The manifest of a Modelfile's FROM: a model in the store (pulled when missing), or a GGUF file
        imported under `name` (a relative path is read from `folder`, the Modelfile's)."""
        reference = parse_reference(ref)
        if reference.kind != "path":
            return self._manifest_of(self.pull(ref, progress=emit))
        path = Path(reference.path).expanduser()
        path = (folder / path if folder and not path.is_absolute() else path).resolve()
        if not path.is_file():
            raise ModelNotFound(f"FROM {ref}: no such file: {path}")
        return self._manifest_of(self.import_file(path, name, source=f"file:{path}", progress=emit))

    def _uploaded(self, filename: str, digest: str, name: str, emit: Progress) -> Manifest:
        """The manifest of a file a client uploaded, recorded under `name`."""
        digest = blob_digest(digest)
        blob = self.layout.blob(digest)
        target = _Target(parse_name(name), f"upload:{filename}", emit)
        with os_errors(), self._lock("name-" + _short_hash(str(target.name))):
            if not blob.is_file():
                raise InvalidRequest(f"files: {filename} ({digest}) is not on the server; upload it first "
                                     f"(POST /api/blobs/{digest})")
            return self._commit(target, digest, infocache.model_info(self.layout, digest, blob, filename))

    def _quantized(self, base: Manifest, name: str, type_: str, emit: Progress) -> Manifest:
        """`base` quantized to `type_` under `name`, with its Modelfile settings (system, template, ...)."""
        source = self._model(base)

        def report(event: dict) -> None:
            if event["event"] == "start":
                if requantizing(source):
                    emit(PullProgress(requantize_warning(source)))
                emit(PullProgress(f"quantizing {source.quantization or 'F32'} model to {event['type']}"))

        quantized = self._manifest_of(self.quantize(source, name, type_, report))
        return replace(quantized, system=base.system, template=base.template, messages=base.messages,
                       license=base.license)

    def _manifest_of(self, model: Model) -> Manifest:
        manifest = read_manifest(self.layout, parse_name(model.name))
        if manifest is None:
            raise StoreError(f"{model.name}: its manifest vanished while creating; try again")
        return manifest

    def _write_named(self, manifest: Manifest, force: bool) -> Model:
        """Write `manifest` under its name, which may already name the same file but another one only
        with `force` (that file is collected when no name uses it any more)."""
        with os_errors(), self._lock("gc"):
            old = read_manifest(self.layout, manifest.name)
            if old is not None and not force and old.digest != manifest.digest:
                raise _taken(old)
            self._replace_manifest(manifest)
        return self._model(manifest)

    # --- lookup helpers ------------------------------------------------------------------------

    def _find(self, reference: Reference) -> Manifest | None:
        manifest = read_manifest(self.layout, reference.name)
        if manifest is None and reference.kind == "name":
            entry = load_catalogue().find(reference.name)
            if entry is not None:
                manifest = read_manifest(self.layout, entry.name)
        return manifest

    def _canonical(self, reference: Reference) -> Name:
        """The name a pull will record: catalogue aliases map to their entry (`smollm2` -> `smollm2:135m`)."""
        entry = load_catalogue().find(reference.name) if reference.kind == "name" else None
        return entry.name if entry else reference.name

    def _present(self, reference: Reference) -> Manifest | None:
        """The manifest a pull can return at once: same source, blob (or linked file) intact."""
        if reference.kind == "path":
            return None  # a local file may have changed under the same name: always re-import
        manifest = self._find(reference)
        if manifest is not None and manifest.link:
            if reference.kind != "name":
                return None  # a download or Hub pull of the same name replaces the link
            self._check_file(manifest, Path(manifest.link.path))  # nothing to fetch: used in place
            return manifest
        if manifest is None or not self.layout.blob(manifest.digest).is_file():
            return None
        if reference.kind == "url" and manifest.source != reference.url:
            return None
        return manifest

    def _not_pulled(self, ref: str, pull_hint: bool = True) -> ModelNotFound:
        """The error for a name the store lacks. `localrun pull REF` is offered only for what a pull could
        fetch (a catalogue name, a Hub repo, a URL), and never by `rm`: a typo gets the close names instead."""
        local = [m.name.removesuffix(":latest") for m in self.list()]
        close = load_catalogue().suggest(ref, local)
        if not pull_hint:
            close = [name for name in close if name in local]
        reference = parse_reference(ref)
        fetchable = reference.kind in ("hf", "url") or load_catalogue().find(reference.name) is not None
        if pull_hint and fetchable:
            return ModelNotFound(f"model {ref!r} is not pulled: run `localrun pull {ref}`")
        if close:
            return ModelNotFound(f"model {ref!r} is not pulled; did you mean {', '.join(close)}?")
        where = "" if not pull_hint or fetchable else ", and the catalogue has no such model"
        return ModelNotFound(f"model {ref!r} is not pulled{where} (`localrun list` shows the models here)")

    def _model(self, manifest: Manifest, check: bool = False) -> Model:
        path = Path(manifest.link.path) if manifest.link else self.layout.blob(manifest.digest)
        if check:
            self._check_file(manifest, path)
        return Model(str(manifest.name), manifest.digest, path, manifest.size, manifest.modified,
                     manifest.source, manifest.facts, manifest.link is not None, manifest.defaults, manifest.origin,
                     manifest.system, manifest.template, manifest.messages, manifest.license)

    def _check_file(self, manifest: Manifest, path: Path) -> None:
        link = manifest.link
        try:
            stat = path.stat()
        except OSError:
            raise StoreError(f"{manifest.name}: {path} is missing; run `localrun pull` for it again") from None
        if link and (stat.st_size != link.size or stat.st_mtime_ns != link.mtime_ns):
            raise StoreError(f"{manifest.name}: the linked file {path} changed since it was pulled; "
                             f"run `localrun pull --link {path}` again")

    # --- fetching ------------------------------------------------------------------------------

    def _fetch(self, reference: Reference, link: bool, emit: Progress) -> Manifest:
        if reference.kind == "path":
            return self._from_file(reference, link, emit)
        if reference.kind == "name":
            return self._from_catalogue(reference, emit)
        mirror = config.read("LOCALRUN_MIRROR")
        with self.policy.client() as client:
            if reference.kind == "hf":
                remote = hf_lookup(client, reference.repo, reference.quant, mirror)
            else:
                remote = Remote(rewrite_host(reference.url, mirror))
            return self._download(client, remote, _Target(reference.name, reference.url or remote.url, emit))

    def _from_catalogue(self, reference: Reference, emit: Progress) -> Manifest:
        entry = load_catalogue().find(reference.name)
        if entry is None:
            close = load_catalogue().suggest(str(reference.name))
            hint = f"; did you mean {', '.join(close)}?" if close else " (see models.toml)"
            raise ModelNotFound(f"model {str(reference.name).removesuffix(':latest')!r} is not in the catalogue{hint}")
        # The catalogue's `ctx` is the model's trained context, not a default to load with: as a default
        # num_ctx it would beat LOCALRUN_CTX_SIZE (server/defaults.py) with up to 131072 tokens a slot.
        bundled = _package_file(entry)
        if bundled:
            return self._import(bundled, entry.sha256, _Target(entry.name, f"package:{entry.package}", emit))
        target = _Target(entry.name, catalogue_remote(entry).url, emit)
        with self.policy.client() as client:
            return self._download(client, catalogue_remote(entry, config.read("LOCALRUN_MIRROR")), target)

    def _from_file(self, reference: Reference, link: bool, emit: Progress) -> Manifest:
        path = Path(reference.path).expanduser().resolve()
        if path.is_dir():
            raise UsageError(f"{path} is a directory; pull takes one .gguf file")
        if not path.is_file():
            raise ModelNotFound(f"no such file: {path}")
        target = _Target(reference.name, f"file:{path}", emit)
        if not link:
            return self._import(path, "", target)
        before = path.stat()
        label = f"pulling {path.name[:40]}"
        digest = hash_file(path, lambda done: emit(PullProgress(label, "", before.st_size, done)))
        info = read_info(path)
        after = path.stat()
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise StoreError(f"{path} changed while it was being verified; try again")
        return self._commit(target, digest, info, link=Link(str(path), after.st_size, after.st_mtime_ns))

    def _download(self, client, remote: Remote, target: _Target) -> Manifest:
        """Download under a lock per file, so a second pull of the same bytes waits and reuses them."""
        digest = f"sha256:{remote.sha256}" if remote.sha256 else ""
        key = digest_key(digest) if digest else url_key(remote.url)
        with self._lock(key):
            if digest and self.layout.blob(digest).is_file():
                return self._commit(target, digest, read_info(self.layout.blob(digest)))
            label = f"pulling {remote.sha256[:12] or remote.url.rsplit('/', 1)[-1][:40]}"
            partial = self.layout.partial_file(key)
            got = Download(client, remote.url, partial, sha256=remote.sha256, policy=self.policy,
                           progress=lambda done, total: target.emit(PullProgress(label, digest, total, done))).run()
            return self._commit(target, got, self._validate(partial, got, target), partial)

    def _import(self, src: Path, sha256: str, target: _Target) -> Manifest:
        """Copy a local file into the store through `partial/`, hashing on the way."""
        key = "import-" + _short_hash(str(src))
        with self._lock(key):
            partial = self.layout.partial_file(key)
            label = f"pulling {sha256[:12] or src.name[:40]}"
            size = src.stat().st_size
            digest = hash_file(src, lambda done: target.emit(PullProgress(label, "", size, done)), copy_to=partial)
            if sha256 and digest != f"sha256:{sha256}":
                partial.unlink(missing_ok=True)
                raise ChecksumMismatch(f"{src}: checksum mismatch (expected sha256:{sha256[:12]}…, "
                                       f"got {digest[:19]}…); nothing was stored")
            return self._commit(target, digest, self._validate(partial, digest, target), partial)

    def _validate(self, partial: Path, digest: str, target: _Target) -> ModelInfo:
        """Parse a checksum-verified partial file as GGUF; a file that is not one is deleted.
        Errors name the source the user gave, not the partial file."""
        target.emit(PullProgress("verifying sha256 digest", digest))
        try:
            return read_info(partial, target.source.removeprefix("file:"))
        except LocalrunError:
            partial.unlink(missing_ok=True)
            raise

    def _commit(self, target: _Target, digest: str, info: ModelInfo, partial: Path | None = None,
                link: Link | None = None) -> Manifest:
        """Move the verified file into blobs/ and write the manifest, both under the GC lock, so a
        concurrent `rm` can never collect the blob between the two."""
        target.emit(PullProgress("writing manifest", digest))
        with self._lock("gc"):
            if partial is not None:
                install_blob(self.layout, partial, digest)
            elif not link and not self.layout.blob(digest).is_file():
                raise StoreError(f"{target.name}: its file vanished while pulling; try again")
            size = link.size if link else self.layout.blob(digest).stat().st_size
            manifest = Manifest(target.name, digest, size, target.source, _now(), info.facts, link, target.defaults,
                                target.origin)
            self._replace_manifest(manifest)
            infocache.save(self.layout, digest, info)  # the parse that validated it serves `show` too
        return manifest

    def _replace_manifest(self, manifest: Manifest) -> None:
        """Write a manifest (GC lock held); the blob it replaces is collected if nothing else uses it."""
        old = read_manifest(self.layout, manifest.name)
        write_manifest(self.layout, manifest)
        if old and not old.link and old.digest != manifest.digest:
            self._collect_garbage()

    # --- locking and garbage -------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self, key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """An inter-process lock; `on_wait` is called once if another holder makes us wait."""
        self.layout.partial.mkdir(parents=True, exist_ok=True)
        with locks.hold(self.layout.lock_file(key), on_wait):
            yield

    def _collect_garbage(self) -> None:
        """Delete the blobs no manifest names, and the scratch files nobody writes; not while a create
        of this store is under way (the next collection does it)."""
        if self._creating:
            return
        sweep(self.layout)
        referenced = referenced_digests(self.layout)
        for digest in list(self.layout.blob_digests()):
            if digest not in referenced:
                self.layout.blob(digest).unlink(missing_ok=True)
        infocache.drop_unused(self.layout, referenced | {m.digest for m in iter_manifests(self.layout)})


@dataclass(frozen=True, slots=True)
class _Target:
    """What a pull records once the bytes are verified: the name, where they came from, defaults."""

    name: Name
    source: str
    emit: Progress
    defaults: dict = field(default_factory=dict)
    origin: dict = field(default_factory=dict)


def _package_file(entry: Entry) -> Path | None:
    """The catalogue file inside an installed Python package (found without importing it)."""
    if not entry.package_file:
        return None
    module, _, rest = entry.package_file.partition("/")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / rest
    return path if path.is_file() else None


def _taken(old: Manifest) -> UsageError:
    return UsageError(f"{old.name} already names another model ({old.digest.removeprefix('sha256:')[:12]}); "
                      f"`localrun rm {old.name}` first, or give --force to replace it")


def _given(value: str | None, inherited: str) -> str:
    """A Modelfile's value when it has the command (even empty: `SYSTEM ""` clears), else the base's."""
    return inherited if value is None else value


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _now() -> datetime:
    return datetime.now(timezone.utc)


__all__ = ["Progress", "Store"]
