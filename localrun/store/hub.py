"""The one Hugging Face API call: list a repository's files to pick the GGUF for a quantization."""

from __future__ import annotations

import httpx

from localrun.errors import DownloadError, ModelNotFound
from localrun.store.sources import Remote, hf_api_url, hf_remote, rewrite_host


def hf_lookup(client: httpx.Client, repo: str, quant: str, mirror: str = "") -> Remote:
    """The download for `repo` at `quant`, pinned to the listed commit, with its LFS sha256 if given."""
    url = rewrite_host(hf_api_url(repo), mirror)
    try:
        response = client.get(url)
    except httpx.TransportError as e:
        raise DownloadError(f"cannot list hf.co/{repo}: {e or type(e).__name__} (no network?)") from None
    if response.status_code in (401, 404):  # the Hub answers 401 for repositories that do not exist
        raise ModelNotFound(f"Hugging Face repository {repo} not found (or private)")
    if response.status_code != 200:
        raise DownloadError(f"cannot list hf.co/{repo}: HTTP {response.status_code}")
    try:
        listing = response.json()
    except ValueError:
        raise DownloadError(f"cannot list hf.co/{repo}: the answer is not JSON") from None
    return hf_remote(listing if isinstance(listing, dict) else {}, repo, quant, mirror)


__all__ = ["hf_lookup"]
