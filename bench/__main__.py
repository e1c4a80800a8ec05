"""``make bench``: run every benchmark and print its figures."""

from bench import data_path, spark_read


def main() -> None:
    print(data_path.report(data_path.run(total_mb=32)))
    print()
    print(data_path.report(data_path.run(total_mb=8, rate_mb_s=1.0)))
    print()
    print(spark_read.report(spark_read.run(total_mb=64)))


if __name__ == "__main__":
    main()
