"""spark-submit job: copy a Rillet stream range to Parquet.

    spark-submit spark/jobs/export_to_parquet.py --endpoint https://<controller>.lambda-url.<region>.on.aws \\
        --stream scope/stream --output s3://bucket/prefix [--start-cut TEXT] [--end-cut TEXT] [--encoding utf-8]

On EMR the executors read segment chunks straight from S3 with the cluster's instance role (which
needs s3:GetObject on the segments bucket) and sign API requests with it; ship the rillet and
rillet_spark packages as the venv-pack archive of docs/spark.md (pydantic is native: no --py-files zips).
"""

import argparse

from pyspark.sql import SparkSession

from rillet_spark.export import export


def main() -> None:
    parser = argparse.ArgumentParser(description="Copy a Rillet stream range to Parquet.")
    parser.add_argument("--endpoint", required=True, help="the controller URL")
    parser.add_argument("--stream", required=True, help="scope/stream")
    parser.add_argument("--output", required=True, help="where to write the Parquet files")
    parser.add_argument("--start-cut", help="a stream cut in text form (default: the head)")
    parser.add_argument("--end-cut", help="a stream cut in text form (default: the tail)")
    parser.add_argument("--encoding", default="binary", choices=["binary", "utf-8"])
    parser.add_argument("--s3-endpoint", help="a non-AWS S3 endpoint (standalone)")
    args = parser.parse_args()
    spark = SparkSession.builder.appName(f"rillet-export-{args.stream}").getOrCreate()
    count = export(spark, args.endpoint, args.stream, args.output, start_cut=args.start_cut,
                   end_cut=args.end_cut, encoding=args.encoding, s3_endpoint=args.s3_endpoint)
    print(f"exported {count} events of {args.stream} to {args.output}")
    spark.stop()


if __name__ == "__main__":
    main()
