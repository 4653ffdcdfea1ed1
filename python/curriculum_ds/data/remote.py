"""Remote streams: a stream's ``remote`` (``s3://``, ``gs://`` or a folder) and its cache folder.

mosaicml-streaming downloads the shards itself (``StreamingDataset(remote=..., local=...)``, see
:func:`curriculum_ds.data.open_stream`): the first process of a node that needs a shard
downloads it into ``local`` while the node's other processes wait on streaming's shared shard
states, and it checks the shard against the hash ``index.json`` records
(:func:`hash_algorithm`). This module does what comes before, once per stream and process:
:func:`sync_stream_metadata` lists the remote, checks that ``index.json`` and every shard file
it lists are there with their recorded sizes, and brings ``index.json`` and the sidecar files of
``prepare`` (``curriculum_meta.json``, ``metrics.npz``) into the cache folder through
streaming's own downloaders, so that :func:`~curriculum_ds.data.read_stream_info` reads them
there as for a local stream.

Endpoints and credentials are streaming's (and boto3's): ``S3_ENDPOINT_URL`` for an
S3-compatible server other than AWS, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_DEFAULT_REGION`` (or ``~/.aws``); for ``gs://``, ``GCS_KEY``/``GCS_SECRET`` (HMAC keys)
or the application default credentials of ``google-cloud-storage``.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

from curriculum_ds.data.index import (
    META_FILENAME,
    METRICS_FILENAME,
    is_plain_file_name,
    read_index,
)
from curriculum_ds.data.tokenizers import HF_TOKENIZER_FILES
from curriculum_ds.errors import DataError

__all__ = [
    "INDEX_FILENAME",
    "check_upload_target",
    "hash_algorithm",
    "list_remote",
    "remote_url",
    "shard_file",
    "sync_stream_metadata",
    "upload_dataset",
]

INDEX_FILENAME = "index.json"
SIDECARS = (META_FILENAME, METRICS_FILENAME, *HF_TOKENIZER_FILES)
"""The files of ``prepare`` besides the shards, downloaded with ``index.json`` when present (the
tokenizer's files too, which ``export`` copies beside the model)."""
SYNC_STAMP = ".curriculum_ds_synced"
"""A cache folder's record (sha256 of the remote URL and its ``index.json``) that its sidecar
files were downloaded for that index."""
DOWNLOAD_TIMEOUT_S = 60.0
"""Seconds a metadata download may take (streaming's own default ``download_timeout``)."""


def remote_url(remote: str, basename: str) -> str:
    """The URL (or path) of the file ``basename`` directly under ``remote``."""
    if "://" in remote:
        return f"{remote.rstrip('/')}/{basename}"
    return str(Path(remote) / basename)


def shard_file(shard: dict[str, Any]) -> tuple[str, int | None, dict[str, str]]:
    """``(basename, bytes, hashes)`` of the file streaming downloads for an ``index.json`` shard.

    The compressed file when the shard has one (``zip_data``), else the raw one (streaming's
    ``Stream._prepare_shard_part``). ``bytes`` is None when the index does not record it.
    """
    info = shard.get("zip_data") or shard.get("raw_data") or {}
    size = info.get("bytes")
    hashes = info.get("hashes") or {}
    return str(info.get("basename")), size if isinstance(size, int) else None, hashes


def hash_algorithm(index: dict[str, Any]) -> str | None:
    """The hash streaming checks each downloaded shard against (``validate_hash``), or None.

    The first (by name) algorithm that ``index.json`` records for the downloaded file of every
    shard and that streaming knows; None when some shard has none (``prepare`` records
    :data:`~curriculum_ds.data.SHARD_HASHES`; streaming's writer records none by default).
    """
    from streaming.base.hashing import is_hash

    common: set[str] | None = None
    for shard in index["shards"]:
        algos = set(shard_file(shard)[2])
        common = algos if common is None else common & algos
    return min((a for a in common or () if is_hash(a)), default=None)


def list_remote(remote: str) -> dict[str, int]:
    """Name → size in bytes of every file directly under ``remote``.

    One listing (paginated) of an ``s3://`` or ``gs://`` prefix, or a ``scandir`` of a folder.
    ``s3://`` goes through boto3 with the endpoint streaming uses (``S3_ENDPOINT_URL``, else AWS)
    and unsigned requests when no credentials are found (a public bucket), as streaming does.

    Raises:
        DataError: the remote cannot be listed (unreachable endpoint, unknown bucket, refused
            credentials, no such folder), naming the remote and the cause.
    """
    scheme, sep, rest = remote.partition("://")
    try:
        if not sep:
            with os.scandir(remote) as entries:
                return {e.name: e.stat().st_size for e in entries if e.is_file()}
        bucket, _, prefix = rest.partition("/")
        prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if scheme == "gs" and not (os.environ.get("GCS_KEY") and os.environ.get("GCS_SECRET")):
            return _list_gcs(bucket, prefix)
        return _list_s3(scheme, bucket, prefix)
    except DataError:
        raise
    except Exception as err:  # botocore, google-cloud and OS errors have no common base
        raise DataError(f"remote {remote} cannot be listed: {_first_line(err)}") from None


def _list_s3(scheme: str, bucket: str, prefix: str) -> dict[str, int]:
    """List an S3 prefix (or GCS through its S3-compatible API with HMAC keys, as streaming)."""
    from boto3.session import Session
    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import NoCredentialsError

    def listing(**config: Any) -> dict[str, int]:
        cfg = Config(connect_timeout=10, retries={"mode": "standard", "max_attempts": 3}, **config)
        if scheme == "gs":
            client = Session().client(
                "s3",
                region_name="auto",
                endpoint_url="https://storage.googleapis.com",
                aws_access_key_id=os.environ["GCS_KEY"],
                aws_secret_access_key=os.environ["GCS_SECRET"],
                config=cfg,
            )
        else:
            client = Session().client(
                "s3", endpoint_url=os.environ.get("S3_ENDPOINT_URL"), config=cfg
            )
        found: dict[str, int] = {}
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, Delimiter="/"
        )
        for page in pages:
            for obj in page.get("Contents", []):
                found[obj["Key"][len(prefix) :]] = int(obj["Size"])
        return found

    try:
        return listing()
    except NoCredentialsError:
        return listing(signature_version=UNSIGNED)


def _list_gcs(bucket: str, prefix: str) -> dict[str, int]:
    """List a GCS prefix with google-cloud-storage (application default credentials)."""
    try:
        from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        raise DataError(
            "gs:// remotes need GCS_KEY and GCS_SECRET (HMAC keys) or the google-cloud-storage "
            "package"
        ) from None
    blobs = storage.Client().list_blobs(bucket, prefix=prefix, delimiter="/")
    return {b.name[len(prefix) :]: int(b.size) for b in blobs}


def _download(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` with streaming's downloader, replacing it atomically.

    Several processes of a node may download the same file at once: each writes its own
    temporary file and renames it over ``dest``, so a reader never sees a partial file.
    """
    from streaming.base.storage.download import CloudDownloader

    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        CloudDownloader.direct_download(url, str(tmp), DOWNLOAD_TIMEOUT_S)
        os.replace(tmp, dest)
    except Exception as err:  # every storage client raises its own errors
        raise DataError(f"cannot download {url}: {_first_line(err)}") from None
    finally:
        tmp.unlink(missing_ok=True)


def sync_stream_metadata(local: str | Path, remote: str) -> dict[str, Any]:
    """Check a remote stream and bring its ``index.json`` and sidecar files into ``local``.

    * lists ``remote`` once (:func:`list_remote`): ``index.json`` must be there;
    * downloads ``index.json`` into ``local`` (created if missing) and checks it
      (:func:`~curriculum_ds.data.index.read_index`, shards not required locally);
    * every shard's downloaded file (:func:`shard_file`) must be listed, with the size
      ``index.json`` records;
    * downloads ``curriculum_meta.json`` and ``metrics.npz`` when the remote has them (kept when
      an earlier sync stamped them as this remote's index's (:data:`SYNC_STAMP`) and they have
      the listed sizes; a cached copy the remote no longer has is removed);
    * when ``index.json`` changed since the last sync, the cached shard files of the old index
      are removed (streaming would otherwise keep a stale shard of the same name).

    Safe to run from several processes at once (each file is replaced atomically). Reads
    nothing but the listing and these small files; no shard is downloaded.

    Args:
        local: The stream's cache folder.
        remote: ``s3://bucket/prefix``, ``gs://bucket/prefix`` or a folder.

    Returns:
        The parsed ``index.json``.

    Raises:
        DataError: one line: the remote cannot be listed or a download failed, no index.json,
            an invalid index, or a shard file missing or of another size than recorded.
    """
    local = Path(local)
    listing = list_remote(remote)
    if INDEX_FILENAME not in listing:
        raise DataError(f"remote {remote} has no {INDEX_FILENAME} (not an MDS dataset)")
    local.mkdir(parents=True, exist_ok=True)
    index_path = local / INDEX_FILENAME
    old = _read_or_none(index_path)
    _download(remote_url(remote, INDEX_FILENAME), index_path)
    new = _read_or_none(index_path) or b""
    if old is not None and old != new:
        _drop_stale_shards(local, old)
    # the sidecars in the cache are those of this remote's index once a sync wrote this stamp
    # (after them): a process that finds no stamp (another one is still downloading) downloads
    stamp = hashlib.sha256(remote.encode("utf-8") + b"\0" + new).hexdigest().encode("ascii")
    synced = _read_or_none(local / SYNC_STAMP) == stamp
    index = read_index(local, require_shards=False)
    for i, shard in enumerate(index["shards"]):
        name, size, _ = shard_file(shard)
        if name not in listing:
            raise DataError(f"remote {remote}: shard file {name} (shards[{i}]) is missing")
        if size is not None and listing[name] != size:
            raise DataError(
                f"remote {remote}: shard file {name} has {listing[name]} bytes but index.json "
                f"records {size} (truncated or corrupt)"
            )
    for name in SIDECARS:
        path = local / name
        if name not in listing:
            path.unlink(missing_ok=True)
        elif not (synced and path.is_file() and path.stat().st_size == listing[name]):
            _download(remote_url(remote, name), path)
    if not synced:
        tmp = local / f".{SYNC_STAMP}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_bytes(stamp)
        os.replace(tmp, local / SYNC_STAMP)
    return index


def upload_dataset(folder: str | Path, remote: str) -> list[str]:
    """Upload a prepared dataset folder to an empty ``s3://`` or ``gs://`` prefix.

    Through mosaicml-streaming's uploaders (``CloudUploader``, the ones ``MDSWriter`` uses, with
    its endpoint and credential variables). The shards and sidecar files go first and
    ``index.json`` last, so a reader never finds an index whose shards are not all there.

    Args:
        folder: A dataset folder written by :func:`~curriculum_ds.data.prepare` (files only).
        remote: ``s3://bucket/prefix`` or ``gs://bucket/prefix``; must hold no file yet.

    Returns:
        The uploaded file names, in upload order.

    Raises:
        DataError: one line naming ``remote``: not an object-store URL, not listable (unknown
            bucket, unreachable endpoint), not empty, or an upload that failed.
    """
    from streaming.base.storage.upload import CloudUploader

    check_upload_target(remote)
    folder = Path(folder)
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != INDEX_FILENAME)
    names.append(INDEX_FILENAME)
    try:
        uploader = CloudUploader.get(out=(str(folder), remote), keep_local=True, exist_ok=True)
        for name in names:
            uploader.upload_file(name)
    except Exception as err:  # every storage client raises its own errors
        raise DataError(f"remote {remote}: upload failed: {_first_line(err)}") from None
    return names


def check_upload_target(remote: str) -> None:
    """Refuse what :func:`upload_dataset` cannot write to: another scheme, or a non-empty prefix.

    Raises:
        DataError: not ``s3://``/``gs://`` with a bucket, the remote cannot be listed, or it
            holds files (their count and one name).
    """
    scheme, sep, rest = remote.partition("://")
    if not sep or scheme not in ("s3", "gs") or not rest.split("/", 1)[0]:
        raise DataError(f"remote {remote}: expected s3://bucket/prefix or gs://bucket/prefix")
    found = list_remote(remote)
    if found:
        raise DataError(
            f"remote {remote}: not empty ({len(found)} file(s), e.g. {min(found)}); "
            "prepare writes only to an empty prefix"
        )


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _drop_stale_shards(local: Path, old_index: bytes) -> None:
    """Remove the cached shard files an earlier ``index.json`` (raw bytes) listed.

    Only plain file names (:func:`~curriculum_ds.data.index.is_plain_file_name`, the rule
    :func:`~curriculum_ds.data.index.read_index` enforces): nothing outside ``local`` is removed.
    """
    import json

    try:
        shards = json.loads(old_index).get("shards") or []
    except (ValueError, AttributeError):
        return
    for shard in shards:
        for key in ("raw_data", "zip_data"):
            info = shard.get(key) if isinstance(shard, dict) else None
            name = info.get("basename") if isinstance(info, dict) else None
            if isinstance(name, str) and is_plain_file_name(name) and name != INDEX_FILENAME:
                (local / name).unlink(missing_ok=True)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
