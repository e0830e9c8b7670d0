"""Where a model's bytes come from: pure functions from references to URLs and file choices.

Nothing here touches the network or the disk, so it is table-tested; `hub.py` does the one
request (the Hugging Face file listing) and `store.py` acts on the result.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote, urlsplit, urlunsplit

from localrun.errors import ModelNotFound, UsageError
from localrun.store.catalogue import Entry

HF_BASE = "https://huggingface.co"
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_QUANT_IN_FILE = re.compile(r"(?i)(?<![A-Za-z0-9])(I?Q[1-8](?:_[A-Z0-9]+)*|T?Q[12]_0|BF16|F16|F32)(?=\.gguf$|[-.])")


@dataclass(frozen=True, slots=True)
class Remote:
    """A file to download: its URL, and what we know about it before asking the server."""

    url: str
    sha256: str = ""
    size: int = 0


def rewrite_host(url: str, mirror: str) -> str:
    """Point a download URL at `LOCALRUN_MIRROR`, keeping its path: air-gapped sites and tests."""
    if not mirror:
        return url
    m = urlsplit(mirror if "://" in mirror else f"http://{mirror}")
    if m.scheme not in ("http", "https") or not m.netloc:
        raise UsageError(f"LOCALRUN_MIRROR must be an http(s) URL, got {mirror!r}")
    u = urlsplit(url)
    return urlunsplit((m.scheme, m.netloc, m.path.rstrip("/") + u.path, u.query, ""))


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet: not loopback, link-local (cloud metadata at
    169.254.169.254), private, shared, multicast or reserved, IPv4-mapped IPv6 included."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") is no part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def hf_file_url(repo: str, file: str, revision: str = "main") -> str:
    return f"{HF_BASE}/{repo}/resolve/{quote(revision, safe='')}/{quote(file)}"


def hf_api_url(repo: str) -> str:
    """The Hub's model listing; `blobs=true` adds each file's size and LFS sha256."""
    return f"{HF_BASE}/api/models/{repo}?blobs=true"


def catalogue_remote(entry: Entry, mirror: str = "") -> Remote:
    url = hf_file_url(entry.repo, entry.file, entry.revision)
    return Remote(rewrite_host(url, mirror), entry.sha256, entry.size)


def hf_remote(listing: dict, repo: str, quant: str, mirror: str = "") -> Remote:
    """Choose the file for `quant` from the Hub's listing of `repo` and pin it to the listed commit."""
    siblings = [s for s in listing.get("siblings", []) if isinstance(s, dict) and "rfilename" in s]
    file = pick_gguf([s["rfilename"] for s in siblings], quant, repo)
    sibling = next(s for s in siblings if s["rfilename"] == file)
    lfs = sibling.get("lfs") or {}
    sha = str(lfs.get("sha256", lfs.get("oid", ""))).removeprefix("sha256:")
    size = int(lfs.get("size") or sibling.get("size") or 0)
    revision = str(listing.get("sha") or "main")
    return Remote(rewrite_host(hf_file_url(repo, file, revision), mirror), sha if len(sha) == 64 else "", size)


def pick_gguf(files: list[str], quant: str, repo: str = "") -> str:
    """The single-file GGUF in `files` whose name carries the quantization label `quant`."""
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
    matches = sorted((f for f in ggufs if quant_of(f) == quant.upper()), key=lambda f: (len(f), f))
    if not matches:
        available = ", ".join(sorted({q for f in ggufs if (q := quant_of(f))})) or "none"
        raise ModelNotFound(f"no {quant} GGUF file in {repo or 'the repository'} (available: {available})")
    whole = [f for f in matches if not _SHARD.search(f)]
    if not whole:
        raise ModelNotFound(f"{repo}: the {quant} model is split into shards, which localrun cannot pull yet")
    return whole[0]


def quant_of(filename: str) -> str:
    """The quantization label in a GGUF file name (`Qwen2.5-0.5B-Instruct-Q4_K_M.gguf` -> `Q4_K_M`)."""
    found = _QUANT_IN_FILE.findall(PurePosixPath(filename).name)
    return found[-1].upper() if found else ""


__all__ = ["Remote", "catalogue_remote", "hf_api_url", "hf_file_url", "hf_remote", "is_public", "pick_gguf", "quant_of",
           "rewrite_host"]
