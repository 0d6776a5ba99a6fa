"""The loader stage: FastLoader, and what it decides for you.

- ``core``: FastLoader itself, a DataLoader subclass;
- ``defaults``: the worker count, prefetch depth and shared-memory check it fills in;
- ``fetch``: in-memory tensor datasets fetched a whole batch at a time;
- ``workers``: worker start-up, and the check that a batch can leave a worker;
- ``tuning``: ``num_workers='tune'``;
- ``proxy``: the base of the wrappers that pass a loader's attributes through;
- ``buckets``: BucketBatchSampler, batches of similar aspect ratios for padded batches.
"""

from fastload.loader.buckets import BucketBatchSampler
from fastload.loader.core import FastLoader
from fastload.loader.defaults import auto_num_workers

__all__ = ["BucketBatchSampler", "FastLoader", "auto_num_workers"]
