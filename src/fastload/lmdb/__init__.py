"""One memory-mapped file per dataset: the writer and the reader (the records they hold
are :mod:`fastload.records`)."""

from fastload.lmdb.dataset import LMDBDataset
from fastload.lmdb.workers import WorkerDiedError
from fastload.lmdb.writer import write_lmdb
from fastload.records.format import RecordFormatError
from fastload.records.targets import TargetError

__all__ = ["LMDBDataset", "RecordFormatError", "TargetError", "WorkerDiedError", "write_lmdb"]
