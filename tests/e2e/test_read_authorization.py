"""Presigned URLs and tail checks are issued only to callers with READ on the stream: the locations
and tails routes are authorized like every read (lambdas/authorization.py), before any lookup."""

from __future__ import annotations

import json

from test_authorization import (  # noqa: F401 - pytest fixtures
    ADMIN_SESSION,
    ANONYMOUS,
    CONSUMER_SESSION,
    PRODUCER_SESSION,
    STRANGER,
    auth_stack,
    call,
    world,
)


def test_only_readers_of_the_stream_get_locations_and_tails(auth_stack, world):  # noqa: F811 - fixtures
    expected = {ADMIN_SESSION: 200, PRODUCER_SESSION: 200, CONSUMER_SESSION: 200, STRANGER: 403, ANONYMOUS: 403}
    for path in (f"/v1/segments/{world}/orders/0/locations?offset=0", f"/v1/segments/{world}/orders/tails?segments=0"):
        for identity, want in expected.items():
            response = call(auth_stack, "read", "GET", path, identity)
            assert response.status == want, (identity, path, response.status, response.data[:300])
            body = json.loads(response.data)
            if want == 403:
                assert body["code"] == "AccessDenied" and "X-Amz-Signature" not in response.data.decode()
    # The other stream of the scope: no grant for the consumer, whatever exists there.
    for path in (f"/v1/segments/{world}/audit/0/locations?offset=0", f"/v1/segments/{world}/audit/tails?segments=0"):
        assert call(auth_stack, "read", "GET", path, CONSUMER_SESSION).status == 403
