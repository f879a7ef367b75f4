"""A DynamoDB table export (ExportTableToPointInTime, ``DYNAMODB_JSON``) where it lies: S3 or a directory.

What AWS writes under the export's prefix (docs/archives.md)::

    AWSDynamoDB/<export id>/manifest-summary.json   one JSON object: outputFormat, itemCount, manifestFilesS3Key...
    AWSDynamoDB/<export id>/manifest-files.json     JSON Lines, one per data file: itemCount, dataFileS3Key...
    AWSDynamoDB/<export id>/data/<name>.json.gz     gzip of JSON Lines, one {"Item": <DynamoDB JSON>} per item
    AWSDynamoDB/<export id>/_started, *.checksum    not read

Keys in the manifests are the bucket's whole keys (``<prefix>/AWSDynamoDB/...``); they are
resolved from their ``AWSDynamoDB/`` on, so an export reads the same in S3 and once copied to a
directory (``aws s3 sync s3://bucket/prefix/ dir/``). A data file is read one line at a time.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

ANCHOR = "AWSDynamoDB/"
SUMMARY = "manifest-summary.json"
FILES = "manifest-files.json"
FORMAT = "DYNAMODB_JSON"


class ArchiveError(Exception):
    """An export that cannot be read as a whole; the message names the file and what is wrong."""


class NotAnExport(ArchiveError):  # noqa: N818 - reads as the condition
    """Nothing under the source looks like a DynamoDB export."""


class MissingManifest(ArchiveError):  # noqa: N818
    """An export folder without its manifests: failed, unfinished, or not copied whole."""


class CorruptItem(ArchiveError):  # noqa: N818
    """One line of a data file is not an item this reader can use."""

    def __init__(self, where: str, line: int, reason: str) -> None:
        self.where = where
        self.line = line
        super().__init__(f"{where} line {line}: {reason}")


class Store(Protocol):
    """Where an export lies: keys relative to the source, and each one's bytes."""

    @property
    def where(self) -> str:
        """The source as the user named it, ending in '/': the start of every message."""
        ...

    def keys(self) -> Iterator[str]: ...

    def open(self, key: str) -> IO[bytes]: ...


@dataclass(frozen=True, slots=True)
class LocalStore:
    root: Path

    @property
    def where(self) -> str:
        return f"{self.root}/"

    def keys(self) -> Iterator[str]:
        if not self.root.is_dir():
            raise NotAnExport(f"{self.root}: no such directory")
        for path in sorted(self.root.rglob("*")):
            if path.is_file():
                yield path.relative_to(self.root).as_posix()

    def open(self, key: str) -> IO[bytes]:
        return (self.root / key).open("rb")


@dataclass(frozen=True, slots=True)
class S3Store:
    """``s3://bucket/prefix/`` read with the caller's S3 client (its credentials, region, endpoint)."""

    client: Any
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, client: Any, url: str) -> S3Store:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise NotAnExport(f"{url}: an S3 source is s3://bucket/prefix/")
        prefix = prefix.strip("/")
        return cls(client, bucket, f"{prefix}/" if prefix else "")

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def keys(self) -> Iterator[str]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            for listed in page.get("Contents", []):
                yield listed["Key"][len(self.prefix) :]

    def open(self, key: str) -> IO[bytes]:
        body: IO[bytes] = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
        return body


@dataclass(frozen=True, slots=True)
class DataFile:
    """One data file: its key in the store, and the items its manifest counts (None: no manifest)."""

    key: str
    items: int | None


@dataclass(frozen=True, slots=True)
class Found:
    #: Each export's data files.
    exports: tuple[tuple[DataFile, ...], ...]
    #: Folders skipped for want of a manifest, while other exports were whole.
    incomplete: tuple[str, ...]


def find_exports(store: Store, *, without_manifest: bool = False) -> Found:
    """Every export under ``store``. Raises :class:`NotAnExport` when there is none, and
    :class:`MissingManifest` when no export is whole (unless ``without_manifest``: then an
    export folder's data files are read as they are, with nothing to check them against)."""
    folders: dict[str, set[str]] = {}
    for key in store.keys():  # noqa: SIM118 - a Store is not a mapping
        split = _split(key)
        if split is not None:
            folders.setdefault(split[0], set()).add(split[1])
    if not folders:
        raise NotAnExport(
            f"{store.where}: not a DynamoDB export: nothing under it is in an {ANCHOR}<export id>/ folder "
            f"(an export writes <prefix>/{ANCHOR}<export id>/{SUMMARY} and data/)"
        )
    exports: list[tuple[DataFile, ...]] = []
    incomplete: list[str] = []
    for folder, names in sorted(folders.items()):
        if SUMMARY in names:
            exports.append(_manifested(store, folder, names))
        elif without_manifest:
            exports.append(tuple(DataFile(folder + name, None) for name in sorted(names) if name.startswith("data/")))
        else:
            incomplete.append(folder)
    if not exports:
        raise MissingManifest(
            f"{store.where}{incomplete[0]}: no {SUMMARY}: the export failed, has not finished, or was not copied "
            f"whole. moto's exports (local mode) write no manifest: --without-manifest reads their data files "
            f"unchecked"
        )
    return Found(tuple(exports), tuple(incomplete))


def items(store: Store, data: DataFile) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(line number, the item's attributes in DynamoDB JSON)`` of each item of ``data``, one line
    at a time. Raises :class:`ArchiveError` for a file that is not whole gzip or holds a count of
    items other than its manifest's, :class:`CorruptItem` for a line that is not an item."""
    where = store.where + data.key
    count = 0
    try:
        with closing(store.open(data.key)) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)["Item"]
                except (ValueError, KeyError, TypeError):
                    raise CorruptItem(where, number, 'not a JSON object {"Item": {...}}') from None
                if not isinstance(item, dict):
                    raise CorruptItem(where, number, '"Item" is not an object of attributes')
                count += 1
                yield number, item
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(f"{where}: not a whole gzip file ({exc})") from None
    if data.items is not None and count != data.items:
        raise ArchiveError(
            f"{where}: holds {count:,} items but the manifest counts {data.items:,}: the file is cut short or not "
            f"this export's"
        )


def _split(key: str) -> tuple[str, str] | None:
    """``(export folder, name inside it)`` of a key under an ``AWSDynamoDB/<id>/`` folder."""
    at = key.rfind(ANCHOR)
    if at < 0:
        return None
    export_id, slash, name = key[at + len(ANCHOR) :].partition("/")
    if not export_id or not slash or not name:
        return None
    return f"{key[:at]}{ANCHOR}{export_id}/", name


def _manifested(store: Store, folder: str, names: set[str]) -> tuple[DataFile, ...]:
    where = store.where + folder + SUMMARY
    with closing(store.open(folder + SUMMARY)) as raw:
        try:
            summary = json.load(raw)
        except ValueError as exc:
            raise ArchiveError(f"{where}: not JSON ({exc})") from None
    if not isinstance(summary, dict):
        raise ArchiveError(f"{where}: not a JSON object")
    if summary.get("outputFormat", FORMAT) != FORMAT:
        raise ArchiveError(f"{where}: an {summary['outputFormat']} export; this reads {FORMAT} (the rotator's)")
    files_key = _resolve(folder, str(summary.get("manifestFilesS3Key") or folder + FILES))
    if files_key is None or files_key.removeprefix(folder) not in names:
        raise MissingManifest(f"{store.where}{folder}{FILES}: missing (its {SUMMARY} is there): copy the export whole")
    files: list[DataFile] = []
    with closing(store.open(files_key)) as raw:
        for number, line in enumerate(raw, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                data_key = _resolve(folder, entry["dataFileS3Key"])
                count = int(entry["itemCount"])
            except (ValueError, KeyError, TypeError):
                raise CorruptItem(store.where + files_key, number, "not a data file entry") from None
            if data_key is None or data_key.removeprefix(folder) not in names:
                raise ArchiveError(
                    f"{store.where}{files_key} line {number}: data file {entry['dataFileS3Key']} is missing"
                )
            files.append(DataFile(data_key, count))
    total = summary.get("itemCount")
    listed = sum(f.items or 0 for f in files)
    if isinstance(total, int) and total != listed:
        raise ArchiveError(f"{where}: counts {total:,} items but its data files count {listed:,}")
    return tuple(files)


def _resolve(folder: str, key: str) -> str | None:
    """A manifest's key (the bucket's) as a key of the store: from its export folder's ``AWSDynamoDB/`` on."""
    split = _split(key)
    if split is None:
        return None
    base = folder[: folder.rfind(ANCHOR)]
    return base + split[0][split[0].rfind(ANCHOR) :] + split[1]
