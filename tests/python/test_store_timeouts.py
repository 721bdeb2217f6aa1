"""The Python store's timeouts are range-checked before they become milliseconds: 1e30 s used to
wrap to a negative wait that failed at once ("not set within -9223372036854775808 ms")."""

import pytest

from ronde import _core


@pytest.mark.parametrize("seconds", [1e30, float("inf"), float("nan"), -1.0])
def test_a_timeout_out_of_range_is_refused_naming_it(seconds):
    server = _core.TcpStoreServer("127.0.0.1", 0, "secret")
    try:
        store = _core.TcpStore("127.0.0.1", server.port, "secret", 5)
        with pytest.raises(ValueError, match="out of range"):
            store.get("never.set", seconds)
        with pytest.raises(ValueError, match="out of range"):
            _core.TcpStore("127.0.0.1", server.port, "secret", seconds)
        store.set("k", b"v")  # the store still serves
        assert store.get("k", 5) == b"v"
    finally:
        server.close()
