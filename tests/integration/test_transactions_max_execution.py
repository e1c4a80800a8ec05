"""A transaction's maximum execution time, as Pravega's controller keeps it (createTxn, pingTxn and the
timeout service):

* it is min(1,000 x the lease asked for at begin, the deployment's bound: RILLET_TXN_MAX_EXECUTION_MS,
  a day by default);
* a ping whose new lease would end after it is refused (TxnFailed, status MAX_EXECUTION_TIME_EXCEEDED)
  and changes nothing: the transaction stays open, and committable, until its current lease ends;
* then the timeout job aborts it.

The control plane's clock is a fixture the tests move, so nothing here waits for time to pass. The
deployment has tables of its own: the timeout job aborts every expired transaction it finds.
"""

from __future__ import annotations

import pytest

from controlplane import transactions
from controlplane.service import Controller
from controlplane.transactions import TxnSettings
from rillet.errors import TxnFailed
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState

STREAM = "s"
HOUR_MS = 3_600_000
SETTINGS = TxnSettings(min_lease_ms=1_000, max_lease_ms=120_000, default_lease_ms=30_000, max_execution_ms=HOUR_MS)


class Clock:
    def __init__(self, start_ms: int) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The control plane's clock for transactions, starting at the real time."""
    fixed = Clock(transactions.now_ms())
    monkeypatch.setattr(transactions, "now_ms", fixed)
    return fixed


def _controller(isolated_deployment, scope: str, settings: TxnSettings | None = None) -> Controller:
    c = Controller.for_deployment(isolated_deployment("txn-max-execution"), txn_settings=settings)
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return c


@pytest.fixture
def txns(isolated_deployment, unique, clock) -> transactions.TransactionTasks:
    return _controller(isolated_deployment, unique, SETTINGS).transactions


def _open_at_its_maximum(txns, scope: str, clock: Clock, lease_ms: int):
    """A transaction begun with ``lease_ms``, kept alive by pings up to a lease that ends exactly at its
    maximum execution time (a ping may reach it, not pass it)."""
    txn = txns.begin(scope, STREAM, lease_ms=lease_ms)
    clock.ms = txn.max_expiry_ms - lease_ms
    pinged = txns.ping(scope, STREAM, txn.txn_id, lease_ms)
    assert pinged.state == TxnState.OPEN and pinged.lease_expiry_ms == txn.max_expiry_ms
    return pinged


def test_the_maximum_execution_time_is_a_thousand_leases_up_to_the_bound(txns, unique, clock):
    began = clock.ms
    short = txns.begin(unique, STREAM, lease_ms=1_000)
    assert (short.lease_expiry_ms, short.max_expiry_ms) == (began + 1_000, began + 1_000 * 1_000)
    long = txns.begin(unique, STREAM, lease_ms=60_000)  # 1,000 leases would be 16.7 h: the bound holds
    assert (long.lease_expiry_ms, long.max_expiry_ms) == (began + 60_000, began + HOUR_MS)


def test_a_ping_past_the_maximum_is_refused_and_the_transaction_stays_open_and_committable(txns, unique, clock):
    txn = _open_at_its_maximum(txns, unique, clock, lease_ms=2_000)
    clock.ms += 1
    with pytest.raises(TxnFailed) as e:  # the same lease a millisecond later would end past it
        txns.ping(unique, STREAM, txn.txn_id, 2_000)
    assert e.value.code == "TxnFailed" and e.value.status == 409
    assert e.value.details == {"status": "MAX_EXECUTION_TIME_EXCEEDED", "max_expiry_ms": txn.max_expiry_ms}
    # the refused ping changed nothing: not the lease, not the state
    assert txns.status(unique, STREAM, txn.txn_id) == txn
    clock.ms = txn.max_expiry_ms - 500
    with pytest.raises(TxnFailed) as e:  # a shorter lease that would still end past it: refused too
        txns.ping(unique, STREAM, txn.txn_id, 1_000)
    assert e.value.details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"
    # until its lease ends the timeout job leaves it alone, and its writer may commit it
    clock.ms = txn.lease_expiry_ms - 1
    assert txn.txn_id not in {t.txn_id for t in txns.expired(limit=1000)}
    assert (f"{unique}/{STREAM}", txn.txn_id) not in txns.abort_expired(limit=1000)
    assert txns.commit(unique, STREAM, txn.txn_id).state == TxnState.COMMITTED


def test_a_refused_ping_keeps_the_current_lease_it_neither_shortens_nor_stretches_it(
        isolated_deployment, unique, clock):
    bounded = TxnSettings(min_lease_ms=1_000, max_lease_ms=120_000, max_execution_ms=100_000)
    txns = _controller(isolated_deployment, unique, bounded).transactions
    txn = txns.begin(unique, STREAM, lease_ms=60_000)
    assert txn.max_expiry_ms == clock.ms + 100_000
    clock.ms += 50_000
    with pytest.raises(TxnFailed) as e:  # would end 10 s past the maximum
        txns.ping(unique, STREAM, txn.txn_id, 60_000)
    assert e.value.details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"
    assert txns.status(unique, STREAM, txn.txn_id).lease_expiry_ms == txn.lease_expiry_ms
    assert txns.ping(unique, STREAM, txn.txn_id, 50_000).lease_expiry_ms == txn.max_expiry_ms


def test_the_timeout_job_aborts_it_once_its_last_lease_ends(txns, unique, clock):
    txn = _open_at_its_maximum(txns, unique, clock, lease_ms=1_000)
    clock.ms += 1
    with pytest.raises(TxnFailed):
        txns.ping(unique, STREAM, txn.txn_id, 1_000)
    clock.ms = txn.max_expiry_ms + 1
    assert txn.txn_id in {t.txn_id for t in txns.expired(limit=1000)}
    assert (f"{unique}/{STREAM}", txn.txn_id) in txns.abort_expired(limit=1000)
    assert txns.status(unique, STREAM, txn.txn_id).state == TxnState.ABORTED
    with pytest.raises(TxnFailed) as e:
        txns.commit(unique, STREAM, txn.txn_id)
    assert e.value.details["status"] == "ABORTED"


def test_the_bound_is_read_from_the_environment_and_defaults_to_a_day(isolated_deployment, unique, clock,
                                                                      monkeypatch):
    assert TxnSettings().max_execution_ms == 24 * HOUR_MS
    monkeypatch.setenv("RILLET_TXN_MAX_EXECUTION_MS", str(1_500_000))
    txns = _controller(isolated_deployment, unique).transactions  # the settings a handler gets
    began = clock.ms
    assert txns.begin(unique, STREAM, lease_ms=1_000).max_expiry_ms == began + 1_000_000
    assert txns.begin(unique, STREAM, lease_ms=2_000).max_expiry_ms == began + 1_500_000
