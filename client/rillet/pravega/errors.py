"""pravega_client's errors, made of Rillet's: a ValueError (manager, writers, transactions) or an
OSError (readers, byte streams) that is also the typed Rillet error, so that both ``except ValueError``
and ``except rillet.StreamNotFound`` catch it; and ``TxnFailedException`` for a closed transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rillet.errors import RilletError, TxnFailed


class TxnFailedException(TxnFailed):
    """A transaction is no longer open (committed, aborted, or timed out): pravega_client's exception.

    As there, its one argument is the transaction's id (an int); ``message`` and ``details`` say why.
    """

    def __init__(self, txn_id: int, message: str = "", **details: Any) -> None:
        super().__init__(message or f"transaction {txn_id:032x} is no longer open", **details)
        self.txn_id = txn_id
        self.args = (txn_id,)


_COMPATIBLE: dict[tuple[type, type], type] = {}


def compatible(error: RilletError, kind: type[Exception]) -> Exception:
    """``error`` as an instance of its own class and of ``kind`` (ValueError or OSError)."""
    if isinstance(error, (kind, TxnFailed)):
        return error
    key = (type(error), kind)
    cls = _COMPATIBLE.get(key)
    if cls is None:
        cls = _COMPATIBLE.setdefault(key, type(type(error).__name__, key, {"__module__": __name__}))
    instance = cls(error.message, **error.details)
    instance.__dict__.update(error.__dict__)
    return instance


@contextmanager
def raising(kind: type[Exception]) -> Iterator[None]:
    """Rillet's errors raised in the block leave it as ``kind`` too (``compatible``)."""
    try:
        yield
    except RilletError as e:
        error = compatible(e, kind)
        if error is e:
            raise
        raise error from e
