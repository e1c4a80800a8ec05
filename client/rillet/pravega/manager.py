"""pravega_client's ``StreamManager``: scopes and streams, and the writers, reader groups and byte
streams it creates; with its scaling and retention policy classes."""

from __future__ import annotations

from rillet.connection import Connection
from rillet.errors import InvalidArgument, NotFound
from rillet.manager import StreamManager as _RilletStreamManager
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.pravega.byte_stream import ByteStream
from rillet.pravega.errors import raising
from rillet.pravega.readers import StreamCuts, StreamReaderGroup, StreamReaderGroupConfig
from rillet.pravega.writers import StreamTxnWriter, StreamWriter
from rillet.reader_group import ReaderGroup, ReaderGroupManager, group_config
from rillet.serializers import BytesSerializer
from rillet.stream_cut import StreamCut
from rillet.transaction import TransactionalEventStreamWriter
from rillet.writer import EventStreamWriter, EventWriterConfig

# Writers send without lingering, as Pravega's do: a block leaves as soon as the one before it is answered.
_WRITER_CONFIG = EventWriterConfig.lowest_latency()


def _endpoint(controller_uri: str, tls_enabled: bool) -> str:
    """The HTTP(S) endpoint of a controller URI as pravega_client takes it (``tcp://``, ``tls://``, none)."""
    scheme, separator, rest = controller_uri.partition("://")
    if not separator:
        scheme, rest = "http", controller_uri
    scheme = {"tcp": "http", "tls": "https"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("http", "https"):
        raise ValueError(f"controller URI {controller_uri!r}: use http(s)://host:port (or tcp:// / tls://)")
    return f"{'https' if tls_enabled else scheme}://{rest}"


class StreamScalingPolicy:
    """How many segments a stream has and whether it auto-scales."""

    def __init__(self, policy: ScalingPolicy | None = None) -> None:
        self.policy = policy or ScalingPolicy.fixed(1)

    @staticmethod
    def fixed_scaling_policy(initial_segments: int) -> StreamScalingPolicy:
        with raising(ValueError):
            return StreamScalingPolicy(ScalingPolicy.fixed(initial_segments))

    @staticmethod
    def auto_scaling_policy_by_data_rate(target_rate_kbytes_per_sec: int, scale_factor: int,
                                         initial_segments: int) -> StreamScalingPolicy:
        return StreamScalingPolicy(ScalingPolicy.by_data_rate(target_rate_kbytes_per_sec, scale_factor,
                                                              initial_segments))

    @staticmethod
    def auto_scaling_policy_by_event_rate(target_events_per_sec: int, scale_factor: int,
                                          initial_segments: int) -> StreamScalingPolicy:
        return StreamScalingPolicy(ScalingPolicy.by_event_rate(target_events_per_sec, scale_factor,
                                                               initial_segments))

    def __repr__(self) -> str:
        return f"StreamScalingPolicy({self.policy!r})"


class StreamRetentionPolicy:
    """How much of a stream is kept (None: everything)."""

    def __init__(self, policy: RetentionPolicy | None = None) -> None:
        self.policy = policy

    @staticmethod
    def none() -> StreamRetentionPolicy:
        return StreamRetentionPolicy(None)

    @staticmethod
    def by_size(size_in_bytes: int) -> StreamRetentionPolicy:
        return StreamRetentionPolicy(RetentionPolicy.by_size(size_in_bytes))

    @staticmethod
    def by_time(time_in_millis: int) -> StreamRetentionPolicy:
        return StreamRetentionPolicy(RetentionPolicy.by_time(time_in_millis))

    def __repr__(self) -> str:
        return f"StreamRetentionPolicy({self.policy!r})"


class StreamManager:
    """Scopes, streams, and the factory of writers, reader groups and byte streams."""

    def __init__(self, controller_uri: str, auth_enabled: bool = False, tls_enabled: bool = False,
                 disable_cert_verification: bool = False) -> None:
        self.controller_uri = controller_uri
        self.endpoint = _endpoint(controller_uri, tls_enabled)
        sign = True if auth_enabled else None  # None: Function URLs are signed, others are not
        with raising(ValueError):
            self.connection = Connection(self.endpoint, sign=sign)
            self.manager = _RilletStreamManager(self.endpoint, sign=sign)

    # -- scopes and streams ------------------------------------------------------------------------

    def create_scope(self, scope_name: str) -> bool:
        with raising(ValueError):
            return self.manager.create_scope(scope_name)

    def delete_scope(self, scope_name: str) -> bool:
        with raising(ValueError):
            return self.manager.delete_scope(scope_name)

    def list_scope(self) -> list[str]:
        with raising(ValueError):
            return [s.scope for s in self.manager.list_scopes()]

    def list_stream(self, scope_name: str) -> list[str]:
        """The scope's streams; [] for a scope that does not exist (or an invalid name)."""
        try:
            with raising(ValueError):
                return list(self.manager.list_streams(scope_name))
        except (NotFound, InvalidArgument):
            return []

    def create_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        with raising(ValueError):
            config = StreamConfiguration(scaling_policy=(scaling_policy or StreamScalingPolicy()).policy,
                                         retention_policy=(retention_policy or StreamRetentionPolicy()).policy,
                                         tags=frozenset(tags or ()))
            return self.manager.create_stream(scope_name, stream_name, config)

    def create_stream(self, scope_name: str, stream_name: str, initial_segments: int) -> bool:
        return self.create_stream_with_policy(scope_name, stream_name,
                                              StreamScalingPolicy.fixed_scaling_policy(initial_segments))

    def update_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        """Replace the stream's scaling policy, retention policy and tags (the defaults when omitted)."""
        with raising(ValueError):
            current = self.manager.get_stream_info(scope_name, stream_name).configuration
            config = StreamConfiguration(**{**dict(current),
                                            "scaling_policy": (scaling_policy or StreamScalingPolicy()).policy,
                                            "retention_policy": (retention_policy or StreamRetentionPolicy()).policy,
                                            "tags": frozenset(tags or ())})
            self.manager.update_stream(scope_name, stream_name, config)
            return True

    def get_stream_tags(self, scope_name: str, stream_name: str) -> list[str]:
        with raising(ValueError):
            return sorted(self.manager.get_stream_tags(scope_name, stream_name))

    def seal_stream(self, scope_name: str, stream_name: str) -> bool:
        with raising(ValueError):
            self.manager.seal_stream(scope_name, stream_name)
            return True

    def delete_stream(self, scope_name: str, stream_name: str) -> bool:
        with raising(ValueError):
            return self.manager.delete_stream(scope_name, stream_name)

    # -- clients -----------------------------------------------------------------------------------

    def create_writer(self, scope_name: str, stream_name: str, max_inflight_events: int = 0) -> StreamWriter:
        with raising(ValueError):
            writer = EventStreamWriter(self.connection, scope_name, stream_name, BytesSerializer(), _WRITER_CONFIG)
        return StreamWriter(writer, max_inflight_events)

    def create_transaction_writer(self, scope_name: str, stream_name: str, writer_id: int) -> StreamTxnWriter:
        with raising(ValueError):
            self.manager.get_stream_info(scope_name, stream_name)  # the stream must exist
        writer = TransactionalEventStreamWriter(self.connection, scope_name, stream_name, BytesSerializer(),
                                                _WRITER_CONFIG)
        writer.writer_id = str(writer_id)
        return StreamTxnWriter(writer)

    def create_reader_group(self, reader_group_name: str, scope_name: str, stream_name: str,
                            read_from_tail: bool = False, stream_cut: StreamCuts | None = None) -> StreamReaderGroup:
        """A group reading the stream from its head, its tail, or ``stream_cut``."""
        with raising(ValueError):
            if stream_cut is not None:
                start: str | StreamCut = StreamCut.of(scope_name, stream_name, list(stream_cut.cut.positions),
                                                      stream_cut.cut.incarnation)
            elif read_from_tail:
                start = self.manager.get_tail(scope_name, stream_name)
            else:
                start = f"{scope_name}/{stream_name}"
            return self._group(reader_group_name, scope_name, [start])

    def create_reader_group_with_config(self, reader_group_name: str, scope_name: str,
                                        rg_config: StreamReaderGroupConfig) -> StreamReaderGroup:
        with raising(ValueError):
            starts: list[str | StreamCut] = [
                self.manager.get_tail(rg_config.scope_name, s) if rg_config.read_from_tail
                else f"{rg_config.scope_name}/{s}" for s in rg_config.stream_names]
            return self._group(reader_group_name, scope_name, starts)

    def _group(self, name: str, scope: str, starts: list[str | StreamCut]) -> StreamReaderGroup:
        ReaderGroupManager(scope, self.connection).create_reader_group(name, group_config(starts))
        streams = [s if isinstance(s, str) else f"{s.scope}/{s.stream}" for s in starts]
        return StreamReaderGroup(ReaderGroup(self.connection, scope, name), streams)

    def delete_reader_group(self, reader_group_name: str, scope_name: str) -> None:
        with raising(ValueError):
            ReaderGroupManager(scope_name, self.connection).delete_reader_group(reader_group_name)

    def create_byte_stream(self, scope_name: str, stream_name: str) -> ByteStream:
        with raising(OSError):
            return ByteStream(self.connection, scope_name, stream_name)

    def __repr__(self) -> str:
        return f"StreamManager(controller_uri={self.controller_uri!r}, endpoint={self.endpoint!r})"
