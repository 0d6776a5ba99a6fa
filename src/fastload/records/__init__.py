"""What a sample is, for every store: the record format (image, label and named target
fields, checked on read), the sources a conversion reads (folders, datasets, COCO files,
mask folders) and the dense targets (boxes, masks, arrays). LMDB files and tar shards
hold the same records."""
