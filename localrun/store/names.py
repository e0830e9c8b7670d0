"""Model references: pure parsing, no I/O. Every store path derives from a `Name` parsed here.

Grammar (case-insensitive keywords; whitespace around the reference is ignored):

    reference := hf | url | path | name
    hf        := ("hf.co" | "huggingface.co") "/" part "/" part [":" quant]     quant defaults to Q4_K_M
    url       := ("https://" | "http://") host "/" ... ".gguf"                   other schemes are refused
    path      := "/" ... | "./" ... | "../" ... | "~" ... | ... ".gguf"         a local file
    name      := part ("/" part){0,3} [":" tag]                               tag defaults to "latest"
    part, tag := [A-Za-z0-9] [A-Za-z0-9._-]{0,79}, with no ".." inside

A `Name` is the key of one manifest: its parts and tag become path components under the store root,
and the part grammar (no separators, no "..", no leading dot, bounded length, ASCII only) is what
guarantees that no reference, however hostile, can name a file outside the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from localrun.errors import InvalidName

DEFAULT_TAG = "latest"
DEFAULT_QUANT = "Q4_K_M"
HF_HOSTS = ("hf.co", "huggingface.co")
MAX_REFERENCE = 512

_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_QUANT = re.compile(r"(?i)(I?Q[1-8](_[A-Z0-9]+)*|T?Q[12]_0|BF16|F16|F32|FP16)")
_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://")


@dataclass(frozen=True, slots=True)
class Name:
    """A canonical store name: `parts` joined by "/" plus a tag, e.g. `smollm2:135m`."""

    parts: tuple[str, ...]
    tag: str

    def __str__(self) -> str:
        return "/".join(self.parts) + ":" + self.tag

    @property
    def model(self) -> str:
        """The name without its tag."""
        return "/".join(self.parts)

    def relpath(self) -> PurePosixPath:
        """Where this name's manifest lives, relative to the manifests directory."""
        return PurePosixPath(*self.parts, self.tag)


@dataclass(frozen=True, slots=True)
class Reference:
    """What the user asked for: a catalogue/store name, a Hugging Face repo, a URL or a local file."""

    kind: str  # "name" | "hf" | "url" | "path"
    name: Name  # the store name the model gets (or is looked up by)
    repo: str = ""  # hf: "user/repo"
    quant: str = ""  # hf: the quantization label to pick
    url: str = ""  # url: the download address
    path: str = ""  # path: the local file, as given


def parse_reference(text: str) -> Reference:
    """Parse any accepted reference; raise InvalidName with one readable line otherwise."""
    text = _clean(text)
    lowered = text.lower()
    if lowered.startswith(("https://", "http://")):
        return _parse_url(text)
    if scheme := _SCHEME.match(lowered):
        raise InvalidName(f"unsupported URL scheme {scheme.group(1)!r} in {text!r}: use an https:// or http:// URL")
    if lowered.split("/", 1)[0] in HF_HOSTS and "/" in text:
        return _parse_hf(text)
    if _looks_like_path(text):
        return Reference("path", slug_name(PurePosixPath(text.replace("\\", "/")).name or text), path=text)
    return Reference("name", parse_name(text))


def parse_name(text: str) -> Name:
    """Parse a store name `a/b/model:tag` (catalogue names and `cp` targets)."""
    text = _clean(text)
    body, tag = _split_tag(text)
    parts = tuple(body.split("/"))
    if len(parts) > 4:
        raise InvalidName(f"invalid model name {text!r}: at most 4 '/'-separated parts")
    for part in parts:
        _check_part(part, text)
    _check_part(tag, text, what="tag")
    if parts[0].lower() in HF_HOSTS:
        return _hf_name(parts, tag, text)
    return Name(tuple(p.lower() for p in parts), tag.lower())


def parse_quant(text: str) -> str:
    """A quantization label, canonical upper case (`q4_k_m` -> `Q4_K_M`)."""
    if not _QUANT.fullmatch(text):
        raise InvalidName(f"invalid quantization {text!r} (expected a label such as Q4_K_M, Q8_0 or F16)")
    return text.upper()


def slug_name(filename: str) -> Name:
    """The store name for a file reached by URL or path: its lower-cased stem, tag `latest`."""
    stem = filename[: -len(".gguf")] if filename.lower().endswith(".gguf") else filename
    slug = _SLUG_BAD.sub("-", stem.lower()).strip("-._")[:80].strip("-._")
    slug = re.sub(r"\.{2,}", ".", slug)
    if not slug:
        raise InvalidName(f"cannot derive a model name from {filename!r}")
    return Name((slug,), DEFAULT_TAG)


def _clean(text: str) -> str:
    if not isinstance(text, str):
        raise InvalidName(f"invalid model reference {text!r}")
    text = text.strip()
    if not text:
        raise InvalidName("empty model name")
    if len(text) > MAX_REFERENCE:
        raise InvalidName(f"model reference too long ({len(text)} characters, at most {MAX_REFERENCE})")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InvalidName(f"invalid model reference {text!r}: control characters")
    return text


def _split_tag(text: str) -> tuple[str, str]:
    if text.count(":") > 1:
        raise InvalidName(f"invalid model name {text!r}: more than one ':'")
    body, _, tag = text.partition(":")
    if _ and not tag:
        raise InvalidName(f"invalid model name {text!r}: empty tag after ':'")
    return body, tag or DEFAULT_TAG


def _check_part(part: str, whole: str, what: str = "name part") -> None:
    if not _PART.fullmatch(part) or ".." in part:
        raise InvalidName(
            f"invalid {what} {part!r} in {whole!r}: use letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit, at most 80 characters)"
        )


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text.lower().endswith(".gguf") or (
        len(text) > 2 and text[1] == ":" and text[2] in "\\/"  # C:\models\x.gguf
    )


def _parse_hf(text: str) -> Reference:
    body, tag = _split_tag(text)
    parts = body.split("/")
    if len(parts) != 3:
        raise InvalidName(f"invalid Hugging Face reference {text!r}: expected hf.co/<user>/<repo>[:<quant>]")
    for part in parts[1:]:
        _check_part(part, text)
    name = _hf_name(tuple(parts), tag, text)
    return Reference("hf", name, repo=f"{parts[1]}/{parts[2]}", quant=name.tag)


def _hf_name(parts: tuple[str, ...], tag: str, whole: str) -> Name:
    if len(parts) != 3:
        raise InvalidName(f"invalid Hugging Face name {whole!r}: expected hf.co/<user>/<repo>[:<quant>]")
    quant = DEFAULT_QUANT if tag.lower() == DEFAULT_TAG else parse_quant(tag)
    return Name(("hf.co", parts[1], parts[2]), quant)


def _parse_url(text: str) -> Reference:
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        raise InvalidName(f"invalid URL {text!r}") from None
    if not host or " " in text:
        raise InvalidName(f"invalid URL {text!r}")
    filename = PurePosixPath(parts.path).name
    if not filename.lower().endswith(".gguf"):
        raise InvalidName(f"URL {text!r} does not name a .gguf file")
    return Reference("url", slug_name(filename), url=text)


__all__ = [
    "DEFAULT_QUANT", "DEFAULT_TAG", "Name", "Reference", "parse_name", "parse_quant", "parse_reference", "slug_name",
]
