"""What authorization costs an append: DynamoDB requests per append block over HTTP, without grants,
with grants and a warm cache (the default, 30 s), and with the cache off (RILLET_GRANTS_CACHE_S=0).

Run: ``.venv/bin/python -m bench.authorization_cost``.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import urllib3

from rillet import api
from rillet.framing import frame
from standalone.gateway import IDENTITY_HEADER
from standalone.stack import Stack, StackConfig

BLOCKS = 50
ADMIN = "arn:aws:iam::111122223333:role/Admin"
PRODUCER = "arn:aws:sts::111122223333:assumed-role/Producer/bench"
STRANGER = "arn:aws:iam::111122223333:user/stranger"
http = urllib3.PoolManager(retries=False, timeout=30)


def _call(url: str, method: str, path: str, body: dict | None = None, identity: str | None = ADMIN) -> None:
    headers = {"content-type": "application/json", IDENTITY_HEADER: identity or ""}
    response = http.request(method, url + path, body=json.dumps(body).encode() if body else None, headers=headers)
    assert response.status == 200, response.data


def _append_requests(stack: Stack, scope: str, identity: str) -> Counter:
    """DynamoDB requests per block for BLOCKS single-event appends by one writer."""
    url = stack.functions["append"].url
    writer = uuid.uuid4().hex
    stack.requests.reset()
    for i in range(BLOCKS):
        response = http.request("POST", f"{url}/v1/segments/{scope}/orders/0", body=frame(b"e" * 100), headers={
            api.WRITER_ID: writer, api.EVENT_NUMBER: str(i), api.EVENT_COUNT: "1", IDENTITY_HEADER: identity,
            "content-type": "application/octet-stream"})
        assert response.status == 200, response.data
    counts, _ = stack.requests.snapshot()
    return Counter({op: n / BLOCKS for (svc, op), n in counts.items() if svc == "dynamodb"})


def run() -> dict[str, dict[str, float]]:
    results = {}
    for name, cache_s, grants in (("no grants", "30", False), ("grants, cache 30 s", "30", True),
                                  ("grants, cache off", "0", True)):
        config = StackConfig.ephemeral(RILLET_GRANTS_CACHE_S=cache_s)
        config.simulate_identities = True
        config.workers = {"controller": 1, "append": 1, "read": 1}
        with Stack(config) as stack:
            url = stack.controller_url
            scope = "b" + uuid.uuid4().hex[:10]
            _call(url, "POST", "/v1/scopes", {"scope": scope})
            _call(url, "POST", f"/v1/scopes/{scope}/streams", {"stream": "orders", "configuration": {}})
            if grants:
                _call(url, "POST", "/v1/grants", {"principal": ADMIN, "resource": "prn::*",
                                                  "permission": "READ_UPDATE"})
                _call(url, "POST", "/v1/grants", {"principal": PRODUCER, "permission": "READ_UPDATE",
                                                  "resource": f"prn::/scope:{scope}/stream:orders"})
            _append_requests(stack, scope, PRODUCER)  # warm the append worker (and its grant cache)
            results[name] = _append_requests(stack, scope, PRODUCER)
            denied = http.request("POST", f"{stack.functions['append'].url}/v1/segments/{scope}/orders/0",
                                  body=frame(b"e"), headers={api.WRITER_ID: "x", api.EVENT_NUMBER: "0",
                                                             api.EVENT_COUNT: "1", IDENTITY_HEADER: STRANGER,
                                                             "content-type": "application/octet-stream"})
            assert denied.status == (403 if grants else 200), denied.data  # the checks were on
    return {name: dict(sorted(counts.items())) for name, counts in results.items()}


def report(results: dict[str, dict[str, float]]) -> str:
    lines = [f"authorization: DynamoDB requests per append block ({BLOCKS} blocks, one writer, over HTTP)"]
    for name, counts in results.items():
        detail = ", ".join(f"{op} {n:.2f}" for op, n in counts.items())
        lines.append(f"  {name:<20} total {sum(counts.values()):.2f}   ({detail})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
