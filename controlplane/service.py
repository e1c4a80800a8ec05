"""The controller: the control plane's parts wired together for one deployment."""

from __future__ import annotations

import gc
from dataclasses import dataclass

from controlplane import models
from controlplane.autoscale import AutoScaler
from controlplane.reader_groups import ReaderGroups
from controlplane.retention import RetentionSettings, RetentionTasks
from controlplane.store import MetadataStore
from controlplane.streams import StreamTasks
from controlplane.sweeper import Sweeper
from controlplane.transactions import TransactionTasks, TxnSettings
from controlplane.watermarks import WatermarkTasks
from dataplane import models as data_models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings

# Python's cyclic collector runs a young collection every 700 allocations and, every hundred of those,
# one that walks every live object. A sync of a large reader group builds and drops a few hundred
# thousand objects (its state, parsed and dumped: 1,000 readers on 5,000 segments), so with that default
# it spent most of its CPU walking objects that were not garbage. The controller's requests make almost
# no reference cycles, so collecting every 50,000 allocations costs a few MB of memory at most
# (bench.reader_group_state --pages has the figures).
COLLECTOR_THRESHOLDS = (50_000, 10, 10)


def tune_collector() -> None:
    """Set the controller process's collector thresholds (COLLECTOR_THRESHOLDS): call once, at start."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


@dataclass
class Controller:
    deployment: Deployment
    store: MetadataStore
    segments: SegmentStore
    streams: StreamTasks
    sweeper: Sweeper
    reader_groups: ReaderGroups
    transactions: TransactionTasks
    retention: RetentionTasks
    autoscaler: AutoScaler
    watermarks: WatermarkTasks

    @classmethod
    def for_deployment(cls, deployment: Deployment, settings: StoreSettings | None = None,
                       txn_settings: TxnSettings | None = None,
                       retention_settings: RetentionSettings | None = None) -> Controller:
        _bind(deployment)
        store = MetadataStore(deployment)
        segments = SegmentStore(deployment, settings)
        streams = StreamTasks(store, segments)
        transactions = TransactionTasks(streams, txn_settings or TxnSettings.from_env())
        streams.transactions = transactions
        retention = RetentionTasks(streams, retention_settings or RetentionSettings.from_env())
        watermarks = WatermarkTasks(streams)
        transactions.watermarks = watermarks
        return cls(deployment, store, segments, streams, Sweeper(streams), ReaderGroups(streams, retention),
                   transactions, retention, AutoScaler(streams), watermarks)

    def bind(self) -> None:
        """Point the models at this controller's deployment (a no-op when they already are)."""
        _bind(self.deployment)


def _bind(deployment: Deployment) -> None:
    models.bind(deployment)
    data_models.bind(deployment)
