"""HTTPS to Rillet's endpoints: connection pooling, retries, SigV4 and typed errors.

Requests to AWS Function URLs (``*.lambda-url.<region>.on.aws``) are signed with SigV4 for the
``lambda`` service using the standard AWS credential chain (environment, profile, SSO, instance
role, ...), which is what AWS_IAM auth on a Function URL requires. Requests to other endpoints
(standalone) are sent unsigned unless ``sign=True``; their region is ``region=``, else AWS_REGION,
else the botocore configuration (AWS_DEFAULT_REGION, the profile).

AWS verifies a signature against the canonical form of the request it decoded, so the URL is sent
already in that form: every byte outside RFC 3986's unreserved set percent-encoded (a space is
``%20``, never ``+``; text as UTF-8), parameters sorted. botocore then signs exactly what goes on
the wire.

Transient failures (connection errors, 429, 5xx, and errors whose type is retryable) are retried
with exponential backoff and full jitter, waiting at least what a 429 or 503 asks in Retry-After
(capped at MAX_RETRY_AFTER_S). Every Rillet request is safe to repeat: creates are idempotent,
appends are de-duplicated by writer id and event number.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3

from rillet import api
from rillet.endpoint import controller_endpoint
from rillet.errors import InvalidArgument, ServiceUnavailable, from_wire

_FUNCTION_URL = re.compile(r"^[a-z0-9]+\.lambda-url\.([a-z0-9-]+)\.on\.aws$")
_UNRESERVED = "-_.~"  # with letters and digits, what RFC 3986 (and so SigV4) leaves unescaped
_MIN_ATTEMPT_S = 1.0  # an attempt started just before a deadline still gets this long to be answered
MAX_RETRY_AFTER_S = 20.0  # a server asking for longer still gets retried after this; the caller's attempts bound the rest


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


class Transport:
    def __init__(self, endpoint: str | None = None, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0, max_attempts: int = 6, pool_size: int = 16) -> None:
        self.endpoint = controller_endpoint(endpoint).rstrip("/")
        host = urlsplit(self.endpoint).hostname or ""
        match = _FUNCTION_URL.match(host)
        self.sign = bool(match) if sign is None else sign
        if self.sign:  # botocore only where requests are signed: it is half of the CLI's start-up otherwise
            from botocore.session import Session
        self.region = region or (match.group(1) if match else None)
        if self.sign and not self.region:
            self.region = os.environ.get("AWS_REGION") or Session().get_config_variable("region")
            if not self.region:
                raise InvalidArgument(f"signing requests to {self.endpoint} needs an AWS region: pass region=, or "
                                      "set AWS_REGION or AWS_DEFAULT_REGION (or a region in the AWS profile)")
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self._pool = urllib3.PoolManager(maxsize=pool_size, retries=False)
        self._credentials = Session().get_credentials() if self.sign else None
        if self.sign and self._credentials is None:
            raise InvalidArgument("signing requests needs AWS credentials, and none were found in the standard chain")

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: bytes | None = None,
                json_body: Any = None, headers: dict[str, str] | None = None,
                timeout_s: float | None = None, deadline: float | None = None) -> HttpResponse:
        """Send a request, retrying transient failures; raise the typed error of a failed answer.

        ``deadline`` (``time.monotonic()``) bounds every attempt's wait and when a new one may start: a
        caller that retries on its own clock (the writer's ``retry_timeout_s``) is never held past it by
        this loop; the last failure is raised then, as after the last attempt."""
        url = self.endpoint + quote(path, safe="/%")  # segments come encoded; anything left raw is encoded here
        query = canonical_query({k: v for k, v in (params or {}).items() if v is not None})
        if query:
            url += "?" + query
        headers = dict(headers or {})
        identity = os.environ.get(api.SIMULATED_IDENTITY_ENV)
        if identity:
            headers[api.SIMULATED_IDENTITY] = identity  # honoured only by a standalone stack that simulates them
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["content-type"] = "application/json"
        elif body is not None:
            headers.setdefault("content-type", "application/octet-stream")
        attempt = 0
        while True:
            attempt += 1
            backoff_s = random.uniform(0, min(5.0, 0.05 * 2 ** attempt))
            wait_s = timeout_s or self.timeout_s
            if deadline is not None:
                wait_s = max(_MIN_ATTEMPT_S, min(wait_s, deadline - time.monotonic()))
            try:
                response = self._send(method, url, body, headers, wait_s)
            except urllib3.exceptions.HTTPError as e:
                if attempt >= self.max_attempts or _past(deadline, backoff_s):
                    raise ServiceUnavailable(f"{method} {url} failed: {e}") from e
            else:
                if response.status < 400:
                    return response
                error = from_wire(response.status, _error_body(response))
                if response.status in (429, 503):
                    backoff_s = max(backoff_s, _retry_after_s(response))
                if not (error.retryable or response.status >= 500) or attempt >= self.max_attempts \
                        or _past(deadline, backoff_s):
                    raise error
            time.sleep(backoff_s)

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
              timeout_s: float) -> HttpResponse:
        if self.sign:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest

            aws_request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
            SigV4Auth(self._credentials.get_frozen_credentials(), "lambda", self.region).add_auth(aws_request)
            headers = dict(aws_request.headers.items())
        r = self._pool.request(method, url, body=body, headers=headers, timeout=timeout_s, preload_content=True)
        return HttpResponse(r.status, {k.lower(): v for k, v in r.headers.items()}, r.data)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()


def _past(deadline: float | None, backoff_s: float) -> bool:
    """Whether the next attempt would start after ``deadline``."""
    return deadline is not None and time.monotonic() + backoff_s >= deadline


def canonical_query(params: dict[str, Any]) -> str:
    """The query string as SigV4 canonicalises it: RFC 3986 percent-encoding of UTF-8, sorted by key, then value."""
    pairs = sorted((quote(str(k), safe=_UNRESERVED), quote(str(v), safe=_UNRESERVED)) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _retry_after_s(response: HttpResponse) -> float:
    """The wait a Retry-After header asks for (delta-seconds or an HTTP date), capped; 0 without one."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return 0.0
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def _error_body(response: HttpResponse) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
