"""A real S3-protocol server on localhost for the remote-stream tests (moto's server).

:func:`s3_server` starts ``moto.server.ThreadedMotoServer`` in this process on a free port and
points boto3 and mosaicml-streaming at it through the environment they read
(``S3_ENDPOINT_URL``, fake ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION``); launched ranks inherit it. :func:`upload_folder` puts a prepared
dataset's files under a bucket prefix with boto3.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    endpoint: str
    server: Any

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)

    def stop(self) -> None:
        self.server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def s3_server(monkeypatch: Any) -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1, with the environment set (through ``monkeypatch``)."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {**S3_ENV, "S3_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    try:
        yield S3Server(endpoint, server)
    finally:
        with contextlib.suppress(Exception):  # already stopped by the test
            server.stop()


def upload_folder(server: S3Server, folder: Path, url: str) -> str:
    """Upload every file of ``folder`` under ``s3://bucket/prefix`` (the bucket is created)."""
    client = server.client()
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    for path in sorted(folder.iterdir()):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix.strip('/')}/{path.name}")
    return url


def delete_object(server: S3Server, url: str) -> None:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    server.client().delete_object(Bucket=bucket, Key=key)


__all__ = ["S3_ENV", "S3Server", "delete_object", "s3_server", "upload_folder"]
