"""StreamManager: create, update, seal, delete and list scopes and streams (Pravega's StreamManager)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Self

from rillet.controller import ControllerClient
from rillet.errors import NotFound
from rillet.models import (
    ScopeInfo,
    StreamConfiguration,
    StreamConfigurationChange,
    StreamInfo,
    StreamRates,
    StreamState,
)
from rillet.names import validate_scope_name, validate_stream_name
from rillet.stream_cut import StreamCut
from rillet.transport import Transport


class StreamManager:
    """Administers scopes and streams through the control API at ``endpoint``.

    ``endpoint`` is the controller's URL: ``http://127.0.0.1:9090`` in standalone, or the
    controller Function URL on AWS (requests to it are SigV4-signed automatically). Left out, it is
    ``RILLET_ENDPOINT`` (as for the CLI), else the standalone one; so is every client's endpoint.
    """

    def __init__(self, endpoint: str | None = None, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.controller = ControllerClient(Transport(endpoint, sign=sign, region=region, timeout_s=timeout_s))

    def close(self) -> None:
        """Nothing to release (connections are pooled); here for symmetry with Pravega's API."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scopes ----------------------------------------------------------------------------------

    def create_scope(self, scope: str) -> bool:
        """Create a scope; False if it already existed."""
        return self.controller.create_scope(scope)

    def check_scope_exists(self, scope: str) -> bool:
        try:
            self.controller.get_scope(validate_scope_name(scope))
            return True
        except NotFound:
            return False

    def list_scopes(self) -> Iterator[ScopeInfo]:
        return self.controller.list_scopes()

    def delete_scope(self, scope: str) -> bool:
        """Delete an empty scope (ScopeNotEmpty otherwise); False if it did not exist."""
        return self.controller.delete_scope(validate_scope_name(scope))

    # -- streams ---------------------------------------------------------------------------------

    def create_stream(self, scope: str, stream: str, configuration: StreamConfiguration | None = None) -> bool:
        """Create a stream; False if it already existed."""
        validate_scope_name(scope)
        validate_stream_name(stream)
        return self.controller.create_stream(scope, stream, configuration or StreamConfiguration())

    def update_stream(self, scope: str, stream: str, configuration: StreamConfiguration) -> StreamState:
        return self.controller.update_stream(scope, stream, configuration)

    def change_stream_configuration(self, scope: str, stream: str, change: StreamConfigurationChange) -> StreamInfo:
        """Change only what ``change`` names (``update_stream`` replaces the whole configuration); the
        controller applies it to the configuration as stored, so concurrent changes all stand."""
        return self.controller.change_stream_configuration(scope, stream, change)

    def seal_stream(self, scope: str, stream: str) -> StreamState:
        """Seal a stream: writers get SegmentSealed, readers reach its end."""
        return self.controller.seal_stream(scope, stream)

    def delete_stream(self, scope: str, stream: str) -> bool:
        """Delete a sealed stream and all its data."""
        return self.controller.delete_stream(scope, stream)

    def scale_stream(self, scope: str, stream: str, seal: list[int], new_ranges: list[tuple[float, float]]) -> int:
        """Seal segments ``seal`` and replace them by new ones with ``new_ranges``; returns the new epoch."""
        return self.controller.scale_stream(scope, stream, seal, new_ranges).epoch

    def check_scale(self, scope: str, stream: str, epoch: int) -> bool:
        """True once the scale that produced ``epoch`` has finished."""
        return self.controller.scale_status(scope, stream, epoch).status == "DONE"

    def truncate_stream(self, scope: str, stream: str, cut: StreamCut) -> StreamState:
        """Truncate the stream at ``cut``: only forward, only at a valid cut."""
        return self.controller.truncate_stream(scope, stream, cut.offsets, cut.incarnation)

    def get_head(self, scope: str, stream: str) -> StreamCut:
        head = self.controller.head_cut(scope, stream)
        return StreamCut.of(scope, stream, head.positions, head.incarnation)

    def get_tail(self, scope: str, stream: str) -> StreamCut:
        info = self.get_stream_info(scope, stream)
        return StreamCut.of(scope, stream, info.tail, info.created_at_ms)

    def check_stream_exists(self, scope: str, stream: str) -> bool:
        try:
            self.controller.stream_info(scope, stream)
            return True
        except NotFound:
            return False

    def list_streams(self, scope: str, tag: str | None = None) -> Iterator[str]:
        """The streams of a scope (internal ones excluded), optionally only those with ``tag``."""
        return self.controller.list_streams(validate_scope_name(scope), tag)

    def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        return self.controller.stream_info(scope, stream)

    def get_stream_rates(self, scope: str, stream: str) -> StreamRates:
        """Why the stream has (not) scaled: each current segment's event, byte and append-request rates over
        the auto-scaler's windows with the policy's split and merge thresholds, its cool-down left (a segment
        younger than the cool-down, 10 minutes by default, never scales), what auto-scaling would decide now,
        and the last decision it made with its reason and outcome."""
        validate_scope_name(scope)
        validate_stream_name(stream)
        return self.controller.stream_rates(scope, stream)

    def get_stream_tags(self, scope: str, stream: str) -> frozenset[str]:
        return self.get_stream_info(scope, stream).configuration.tags
