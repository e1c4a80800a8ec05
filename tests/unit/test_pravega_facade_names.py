"""The Pravega facade's first import path, ``rillet.pravega_client`` (code written before it moved to
``rillet.pravega`` uses it), still gives the same classes."""

from __future__ import annotations

import rillet.pravega
import rillet.pravega_client


def test_the_first_import_path_gives_the_facade_s_own_classes():
    assert rillet.pravega_client.__all__ == rillet.pravega.__all__
    for name in rillet.pravega.__all__:
        assert getattr(rillet.pravega_client, name) is getattr(rillet.pravega, name), name
