"""One memory-mapped file per dataset: the record format, the writer and the reader."""

from fastload.lmdb.dataset import LMDBDataset
from fastload.lmdb.format import RecordFormatError
from fastload.lmdb.targets import TargetError
from fastload.lmdb.writer import WorkerDiedError, write_lmdb

__all__ = ["LMDBDataset", "RecordFormatError", "TargetError", "WorkerDiedError", "write_lmdb"]
