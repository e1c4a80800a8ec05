"""``min_partitions`` is a minimum whenever the plan has that many parts: partitions packed by bytes
are split at part boundaries until there are enough (a rate-limited micro-batch's blocks differ in
size, and packing by bytes alone gave 6, 4, then 3 partitions for ``min_partitions=8``)."""

from __future__ import annotations

from rillet_spark.planning import RangePartition, _at_least


def _partition(sizes: list[int], start: int = 0) -> RangePartition:
    partition = RangePartition("sc", "s", 0, start, start, "bucket")
    for size in sizes:
        partition.parts.append((partition.end, size, f"key{partition.end}", 0))
        partition.end += size
    return partition


def test_partitions_are_split_at_part_boundaries_until_the_minimum():
    packed = [_partition([100, 10, 10, 10]), _partition([5, 5, 5, 5], start=130)]
    split = _at_least(packed, 8)
    assert len(split) == 8
    assert [p.parts for p in split] and all(len(p.parts) == 1 for p in split)
    parts = [part for p in split for part in p.parts]
    assert parts == [part for p in packed for part in p.parts]  # every part once, in order
    assert all(p.start == p.parts[0][0] and p.end == p.parts[-1][0] + p.parts[-1][1] for p in split)


def test_the_largest_is_split_first_and_a_single_part_stays_whole():
    assert [len(p.parts) for p in _at_least([_partition([100, 10, 10, 10]), _partition([5, 5])], 3)] == [1, 3, 2]
    assert len(_at_least([_partition([100]), _partition([7])], 8)) == 2  # fewer parts than the minimum
    assert _at_least([_partition([1, 2])], None)[0].parts == _partition([1, 2]).parts
