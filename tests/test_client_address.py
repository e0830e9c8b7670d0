"""Host settings to base URLs: the forms users type into LOCALRUN_HOST and --host."""

import pytest

from localrun.client.address import parse_address
from localrun.errors import UsageError


@pytest.mark.parametrize("value, url, loopback", [
    ("127.0.0.1:11435", "http://127.0.0.1:11435", True),
    ("localhost", "http://localhost:11435", True),
    (":8080", "http://127.0.0.1:8080", True),
    ("0.0.0.0:9000", "http://127.0.0.1:9000", True),
    ("[::1]:9000", "http://[::1]:9000", True),
    ("http://10.0.0.2:8000", "http://10.0.0.2:8000", False),
    ("http://10.0.0.2", "http://10.0.0.2:80", False),
    ("10.0.0.2", "http://10.0.0.2:11435", False),
    ("https://api.example.com/v1", "https://api.example.com:443", False),
    ("https://example.com/proxy/v1/", "https://example.com:443/proxy", False),
    ("  127.0.0.1:5000  ", "http://127.0.0.1:5000", True),
])
def test_addresses(value, url, loopback):
    address = parse_address(value)
    assert address.base_url == url
    assert address.is_loopback is loopback


@pytest.mark.parametrize("value", ["ftp://host", "127.0.0.1:notaport", "http://user@host", "host:99999",
                                   "http://host/?q=1"])
def test_bad_addresses(value):
    with pytest.raises(UsageError):
        parse_address(value)
