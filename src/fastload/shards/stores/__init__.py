"""Where a shard set's bytes come from when they are not in a local folder: a transport
per URL scheme (S3 through boto3, GCS, Azure and https through obstore), the node's
cache they are fetched into, the download-ahead that fills it, and hedged reads."""
