"""Streaming event-time windows: count the messages of a topic per key and tumbling
window, with a watermark, and write each window's count exactly once.

Output mode is append: a window is emitted once, when the watermark passes its end,
with its final count; the transactional sink makes the micro-batch that emits it
visible exactly once, also when it is replayed after a crash.  A message's event time
is its ``__eventTime`` (its publish time when the producer set none).

    spark-submit spark-jobs/windowed_counts.py --input-topic clicks --output-topic click-counts \
        --checkpoint /tmp/clicks-ckpt --window '1 minute' --watermark '30 seconds'
"""

from __future__ import annotations

import sys

import jobcommon
import transforms
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery


def start(spark: SparkSession, args) -> StreamingQuery:
    events = jobcommon.read_stream(spark, args, args.input_topic).load()
    counts = transforms.windowed_counts(events, args.window, args.watermark)
    writer = (transforms.counts_to_messages(counts).writeStream.format("magnetar")
              .options(**jobcommon.connection_options(args))
              .option("topic", args.output_topic)
              .option("checkpointLocation", args.checkpoint)
              .outputMode("append"))
    return jobcommon.with_trigger(writer, args).start()


def parse_args(argv: list[str] | None):
    p = jobcommon.parser(__doc__.splitlines()[0])
    jobcommon.add_streaming_options(p)
    p.add_argument("--input-topic", default="clicks")
    p.add_argument("--output-topic", default="click-counts")
    p.add_argument("--window", default="1 minute", help="window length (default %(default)s)")
    p.add_argument("--watermark", default="30 seconds",
                   help="how late an event may be and still count (default %(default)s)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    query = start(jobcommon.session("magnetar-windowed-counts", args), args)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
