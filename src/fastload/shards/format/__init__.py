"""What a shard set is on disk: its index (``index.json``), each shard's member table,
how the two are laid out, a sample's members and their names, and the scan that indexes
WebDataset tars that come without an index."""
