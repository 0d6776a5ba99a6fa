"""Writing a shard set: samples as tar shards, to a folder or a bucket, crash-safe and
resumable, here or on Ray workers, the index last."""
