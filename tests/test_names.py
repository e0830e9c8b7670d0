"""Model references: a table of valid and hostile inputs, and a fuzz proving no name leaves the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localrun.errors import InvalidName
from localrun.store.layout import Layout
from localrun.store.names import Name, parse_name, parse_quant, parse_reference

VALID = [
    # text, kind, canonical store name, extra field checks
    ("smollm2", "name", "smollm2:latest", {}),
    ("smollm2:135m", "name", "smollm2:135m", {}),
    ("SmolLM2:135M", "name", "smollm2:135m", {}),
    ("  qwen2.5:0.5b  ", "name", "qwen2.5:0.5b", {}),
    ("library/llama3.2:3b", "name", "library/llama3.2:3b", {}),
    ("a/b/c/d:e", "name", "a/b/c/d:e", {}),
    ("x_y-z.1:t_1.2-3", "name", "x_y-z.1:t_1.2-3", {}),
    ("hf.co/bartowski/Qwen2.5-0.5B-Instruct-GGUF", "hf", "hf.co/bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M",
     {"repo": "bartowski/Qwen2.5-0.5B-Instruct-GGUF", "quant": "Q4_K_M"}),
    ("hf.co/user/repo:q8_0", "hf", "hf.co/user/repo:Q8_0", {"quant": "Q8_0"}),
    ("huggingface.co/user/repo:IQ4_XS", "hf", "hf.co/user/repo:IQ4_XS", {"repo": "user/repo"}),
    ("HF.CO/user/repo:latest", "hf", "hf.co/user/repo:Q4_K_M", {}),
    ("hf.co/user/repo:bf16", "hf", "hf.co/user/repo:BF16", {}),
    ("https://example.com/models/SmolLM2-135M.Q4_1.gguf", "url", "smollm2-135m.q4_1:latest",
     {"url": "https://example.com/models/SmolLM2-135M.Q4_1.gguf"}),
    ("http://127.0.0.1:8000/a/b/My%20Model.gguf", "url", "my-20model:latest", {}),
    ("./models/tiny.gguf", "path", "tiny:latest", {"path": "./models/tiny.gguf"}),
    ("/abs/path/Tiny Model.GGUF", "path", "tiny-model:latest", {}),
    ("~/Downloads/x.gguf", "path", "x:latest", {}),
    ("relative.gguf", "path", "relative:latest", {}),
    ("../up/../x.gguf", "path", "x:latest", {}),
    ("C:\\models\\win.gguf", "path", "win:latest", {}),
]

INVALID = [
    "", "   ", "smollm2:", ":tag", "a:b:c", "smollm2:../x", "foo/../bar", "../", "..", ".hidden",
    "-dash", "name:-tag", "a//b", "/", "a/b/c/d/e", "smollm2:/etc/passwd", "nul\x00byte",
    "tab\tin", "new\nline", "x" * 81, "model:" + "t" * 81, "a" * 513, "ünïcode", "emoji🙂",
    "full\uff0fwidth", "zero\u200bwidth", "hf.co", "hf.co/user", "hf.co/user/repo/extra",
    "hf.co/user/repo:not-a-quant", "hf.co/../repo", "hf.co/user/..:Q4_K_M", "https://example.com/x.bin",
    "https://", "https:///x.gguf", "back\\slash", "a..b", "name:a..b", "sp ace", "ftp://foo/x.gguf",
    "file:///tmp/x.gguf", "s3://bucket/x.gguf",
]


@pytest.mark.parametrize("text,kind,canonical,fields", VALID)
def test_valid_references(text, kind, canonical, fields):
    ref = parse_reference(text)
    assert (ref.kind, str(ref.name)) == (kind, canonical)
    for key, value in fields.items():
        assert getattr(ref, key) == value


@pytest.mark.parametrize("text", INVALID)
def test_invalid_references_raise_one_line(text):
    with pytest.raises(InvalidName) as info:
        parse_reference(text)
    assert "\n" not in info.value.message and info.value.message


def test_another_url_scheme_is_named_not_taken_for_a_file():
    with pytest.raises(InvalidName, match="unsupported URL scheme 'ftp'.*https:// or http://"):
        parse_reference("ftp://foo/x.gguf")


@pytest.mark.parametrize("text,expected", [("q4_k_m", "Q4_K_M"), ("Q8_0", "Q8_0"), ("iq3_xxs", "IQ3_XXS"),
                                           ("f16", "F16"), ("BF16", "BF16"), ("Q4_0_4_4", "Q4_0_4_4")])
def test_quant_labels(text, expected):
    assert parse_quant(text) == expected


@pytest.mark.parametrize("text", ["Q9", "K_M", "q4-k-m", "latest", "Q4_K_M/..", ""])
def test_bad_quant_labels(text):
    with pytest.raises(InvalidName):
        parse_quant(text)


def test_cp_targets_are_plain_names():
    assert str(parse_name("mine/tiny:v2")) == "mine/tiny:v2"
    with pytest.raises(InvalidName):
        parse_name("mine/../../etc:x")


def _inside(root: Path, name: Name) -> bool:
    target = Layout(root).manifest(name).resolve()
    return target.is_relative_to((root / "manifests").resolve()) and target != (root / "manifests").resolve()


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=120) | st.builds(lambda a, b: f"{a}:{b}", st.text(max_size=40), st.text(max_size=40))
       | st.builds(lambda parts: "/".join(parts), st.lists(st.sampled_from(["..", ".", "", "a", "/", "~", "\x00", "hf.co"]),
                                                           max_size=6)))
def test_no_reference_escapes_the_store(tmp_path_factory, text):
    root = tmp_path_factory.getbasetemp() / "fuzz-store"
    try:
        ref = parse_reference(text)
    except InvalidName:
        return
    assert _inside(root, ref.name), (text, ref.name)
    for part in (*ref.name.parts, ref.name.tag):
        assert part not in (".", "..") and "/" not in part and "\\" not in part and "\x00" not in part
