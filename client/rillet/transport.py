"""HTTPS to Rillet's endpoints: connection pooling, retries, SigV4 and typed errors.

Requests to AWS Function URLs (``*.lambda-url.<region>.on.aws``) are signed with SigV4 for the
``lambda`` service using the standard AWS credential chain (environment, profile, SSO, instance
role, ...), which is what AWS_IAM auth on a Function URL requires. Requests to other endpoints
(standalone) are sent unsigned unless ``sign=True``.

Transient failures (connection errors, 429, 5xx, and errors whose type is retryable) are retried
with exponential backoff and full jitter. Every Rillet request is safe to repeat: creates are
idempotent, appends are de-duplicated by writer id and event number.
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.session import Session

from rillet.errors import RilletError, ServiceUnavailable, from_wire

_FUNCTION_URL = re.compile(r"^[a-z0-9]+\.lambda-url\.([a-z0-9-]+)\.on\.aws$")


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


class Transport:
    def __init__(self, endpoint: str, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0, max_attempts: int = 6, pool_size: int = 16) -> None:
        self.endpoint = endpoint.rstrip("/")
        host = urlsplit(self.endpoint).hostname or ""
        match = _FUNCTION_URL.match(host)
        self.sign = bool(match) if sign is None else sign
        self.region = region or (match.group(1) if match else None)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self._pool = urllib3.PoolManager(maxsize=pool_size, retries=False)
        self._credentials = Session().get_credentials() if self.sign else None
        if self.sign and self._credentials is None:
            raise RilletError("signing requests needs AWS credentials, and none were found in the standard chain")

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: bytes | None = None,
                json_body: Any = None, headers: dict[str, str] | None = None,
                timeout_s: float | None = None) -> HttpResponse:
        """Send a request, retrying transient failures; raise the typed error of a failed answer."""
        url = self.endpoint + path
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urlencode(query)
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["content-type"] = "application/json"
        elif body is not None:
            headers.setdefault("content-type", "application/octet-stream")
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._send(method, url, body, headers, timeout_s or self.timeout_s)
            except urllib3.exceptions.HTTPError as e:
                if attempt >= self.max_attempts:
                    raise ServiceUnavailable(f"{method} {url} failed: {e}") from e
            else:
                if response.status < 400:
                    return response
                error = from_wire(response.status, _error_body(response))
                if not (error.retryable or response.status >= 500) or attempt >= self.max_attempts:
                    raise error
            time.sleep(random.uniform(0, min(5.0, 0.05 * 2 ** attempt)))

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
              timeout_s: float) -> HttpResponse:
        if self.sign:
            aws_request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
            SigV4Auth(self._credentials.get_frozen_credentials(), "lambda", self.region).add_auth(aws_request)
            headers = dict(aws_request.headers.items())
        r = self._pool.request(method, url, body=body, headers=headers, timeout=timeout_s, preload_content=True)
        return HttpResponse(r.status, {k.lower(): v for k, v in r.headers.items()}, r.data)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()


def _error_body(response: HttpResponse) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
