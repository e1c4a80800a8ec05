"""A routing key is text: anything else, or text that has no UTF-8 form, is a typed InvalidArgument in
the SDK, never a TypeError, AttributeError or UnicodeEncodeError. (On the wire, the control API's
query validation already refuses a key that is not valid text with a 400.)"""

from __future__ import annotations

import pytest

from rillet.errors import InvalidArgument, RilletError
from rillet.keyspace import hash_routing_key

BAD_KEYS = [5, 1.5, b"bytes", ["a", "list"], {"a": "dict"}, "lone surrogate \ud800"]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_routing_key_is_a_typed_error_in_the_sdk(key):
    with pytest.raises(InvalidArgument) as raised:
        hash_routing_key(key)
    assert not isinstance(raised.value, TypeError | ValueError)
    assert isinstance(raised.value, RilletError) and raised.value.status == 400


@pytest.mark.parametrize("key", ["", "k", "é", "\U0001f600", "x" * 10_000])
def test_good_routing_keys_hash_into_the_key_space(key):
    assert 0.0 <= hash_routing_key(key) < 1.0

