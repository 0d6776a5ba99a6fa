"""One memory-mapped file per dataset: the record format, the writer and the reader."""

from fastload.lmdb.dataset import LMDBDataset
from fastload.lmdb.workers import WorkerDiedError
from fastload.lmdb.writer import write_lmdb
from fastload.records.format import RecordFormatError
from fastload.records.targets import TargetError

__all__ = ["LMDBDataset", "RecordFormatError", "TargetError", "WorkerDiedError", "write_lmdb"]
