"""bench.reader_group_state --scale runs, and a large group's syncs keep off its record (issue 40): they
read the head item and their own item while the record has not changed, and a checkpoint's passes go to
the readers' items, folded into the record once.

60 readers on 60 segments (a record of some 26 KB of JSON, past the size read whole) over 60 simulated
seconds with a 30 s automatic checkpoint, syncs spread over 16 controller processes. Before issue 40's
change each pass rewrote the record (62 record writes here) and each sync read it (3.0 units a sync here)."""

from __future__ import annotations

import pytest
from test_benchmark_figures import _run

pytestmark = pytest.mark.timeout(300)


def test_a_checkpoint_of_sixty_readers_completes_with_a_few_record_writes_and_syncs_read_two_units():
    figures = _run("reader_group_state", "reader_group_state.run_metered(60, 60, 60, reader_group_state.sdk_cadence, "
                                         "30_000, containers=16).__dict__")
    assert figures["checkpoints_completed"] == 1
    assert figures["group_record_writes"] <= 4, figures  # the checkpoint's start and finish, a lease fold
    assert figures["read_units"] / figures["syncs"] <= 2.6, figures  # the head and the reader's item: 2.26
