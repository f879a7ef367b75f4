"""Archives: the readings of a dropped table, read back from its DynamoDB export.

* :mod:`.export`    the export as AWS writes it (manifests, gzip'd DynamoDB JSON lines), in S3 or a directory
* :mod:`.readings`  its blocks decoded, each reading once (the newest copy), in bounded memory

``tsctl archive`` is the command line over this library; docs/archives.md describes both formats.
"""

from .export import ArchiveError, CorruptItem, LocalStore, MissingManifest, NotAnExport, S3Store, Store
from .readings import DEFAULT_MAX_READINGS, ReadStats, Selection, read_readings

__all__ = [
    "DEFAULT_MAX_READINGS",
    "ArchiveError",
    "CorruptItem",
    "LocalStore",
    "MissingManifest",
    "NotAnExport",
    "ReadStats",
    "S3Store",
    "Selection",
    "Store",
    "read_readings",
]
