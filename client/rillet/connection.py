"""A connection to one Rillet deployment: the control API, and the data APIs it points to."""

from __future__ import annotations

from functools import cached_property

from rillet.controller import ControllerClient
from rillet.segments import SegmentClient
from rillet.transport import Transport


class Connection:
    """Holds the pooled HTTP transports; factories, writers and readers share one.

    Only the controller's URL is configured; the append, read and tails URLs are discovered from it
    (``GET /v1/endpoints``), so one URL is all a client needs.
    """

    def __init__(self, endpoint: str | None = None, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self._options = {"sign": sign, "region": region, "timeout_s": timeout_s}
        self.controller = ControllerClient(Transport(endpoint, **self._options))

    @cached_property
    def segments(self) -> SegmentClient:
        endpoints = self.controller.endpoints
        read = Transport(endpoints.read_url, pool_size=32, **self._options)
        tails = read if endpoints.tail_check_url == endpoints.read_url else Transport(
            endpoints.tail_check_url, pool_size=8, **self._options)
        return SegmentClient(Transport(endpoints.append_url, pool_size=32, **self._options), read, tails)
