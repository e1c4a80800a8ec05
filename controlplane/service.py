"""The controller: the control plane's parts wired together for one deployment."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane import models
from controlplane.reader_groups import ReaderGroups
from controlplane.store import MetadataStore
from controlplane.streams import StreamTasks
from controlplane.sweeper import Sweeper
from dataplane import models as data_models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings


@dataclass
class Controller:
    deployment: Deployment
    store: MetadataStore
    segments: SegmentStore
    streams: StreamTasks
    sweeper: Sweeper
    reader_groups: ReaderGroups

    @classmethod
    def for_deployment(cls, deployment: Deployment, settings: StoreSettings | None = None) -> Controller:
        models.bind(deployment)
        data_models.bind(deployment)
        store = MetadataStore(deployment)
        segments = SegmentStore(deployment, settings)
        streams = StreamTasks(store, segments)
        return cls(deployment, store, segments, streams, Sweeper(streams), ReaderGroups(streams))
