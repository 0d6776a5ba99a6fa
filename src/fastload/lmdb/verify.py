"""``fastload verify``: read every record of a database, check its CRC and decode it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tqdm import tqdm

from fastload.decode.opencv import ImageDecodeError
from fastload.lmdb.dataset import LMDBDataset
from fastload.records.format import RecordFormatError

__all__ = ["VerifyReport", "verify_lmdb"]


@dataclass
class VerifyReport:
    count: int
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.checked == self.count


def verify_lmdb(path: str | os.PathLike[str], *, progress: bool = True) -> VerifyReport:
    """Check every record: present, CRC-32 intact, image decodable, label in range, and
    read as a sample (fields become a target for its image) as LMDBDataset reads it."""
    dataset = LMDBDataset(path, check=True)
    report = VerifyReport(len(dataset))
    classes = len(dataset.classes)
    for index in tqdm(range(len(dataset)), unit="record", disable=not progress):
        try:
            record = dataset.record(index, check=True)
            dataset[index]  # the image decoded, the fields made a target for it
        except (KeyError, RecordFormatError, ImageDecodeError) as error:
            report.problems.append(str(error).strip("'\""))
            continue
        if classes and isinstance(record.label, int) and not 0 <= record.label < classes:
            report.problems.append(f"record {index}: label {record.label} outside 0..{classes - 1}")
            continue
        report.checked += 1
    return report
