"""Helpers for the tests of code that uses fastload; nothing on the data path imports them.

- :mod:`~fastload.testing.s3server`: ``LocalS3``, OpenStack Swift's S3 API on 127.0.0.1
  (signatures checked, range reads as S3 serves them); needs ``pip install
  '.[testing]'`` (OpenStack Swift and boto3);
- :mod:`~fastload.testing.gcsserver`: ``LocalGCS``, fake-gcs-server (its PyPI wheel);
- :mod:`~fastload.testing.azureserver`: ``LocalAzurite``, Microsoft's Azurite (npm);
- :mod:`~fastload.testing.proxy`: ``FaultyProxy``, in front of any of them for the
  faults of object storage (503s, bodies cut short or altered, stalls);
- :mod:`~fastload.testing.shapes`: ``ShapesDetection``, small generated images of
  shapes with their boxes, labels and masks, as torchvision's detection datasets give
  them.
"""
