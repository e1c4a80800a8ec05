"""``make bench``: run every benchmark and print its figures (docs/benchmarks.md records the latest)."""

from bench import (
    append_breakdown,
    append_cost,
    byte_stream,
    cli_throughput,
    control_ops,
    data_path,
    fault_history,
    idle_stack,
    inflight_appends,
    latency,
    partition_heat,
    reader_group_state,
    record_sizes,
    retention_cycle,
    segment_contention,
    segment_requests,
    segment_throughput,
    spark_read,
    writer_count,
)


def main() -> None:
    print(data_path.report(data_path.run(total_mb=64)))
    print()
    print(data_path.report(data_path.run(total_mb=8, rate_mb_s=1.0)))
    print()
    print(latency.report(latency.run()))
    print()
    print(append_cost.report(append_cost.run()))
    print()
    print(writer_count.report(writer_count.run()))
    print()
    print(segment_throughput.report(segment_throughput.run()))
    print()
    print(segment_contention.report(segment_contention.run()))
    print()
    print(record_sizes.report(record_sizes.run()))
    print()
    print(append_breakdown.report(append_breakdown.run(blocks=8)))
    print()
    print(segment_requests.report(segment_requests.run()))
    print()
    print(byte_stream.report(byte_stream.run()))
    print()
    print(inflight_appends.report(inflight_appends.run()))
    print()
    print(spark_read.report(spark_read.run(total_mb=16)))
    print()
    print(retention_cycle.report(retention_cycle.run(streams=1000)))
    print()
    print(control_ops.report(control_ops.run()))
    print()
    print(cli_throughput.report(cli_throughput.run()))
    print()
    print(reader_group_state.report(reader_group_state.run()))
    print()
    print(fault_history.report(fault_history.run()))
    print()
    print(idle_stack.report(idle_stack.run()))
    print()
    print(partition_heat.report(partition_heat.run()))


if __name__ == "__main__":
    main()
