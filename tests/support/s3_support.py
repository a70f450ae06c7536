"""A real S3 server on 127.0.0.1 (moto's server mode) and a fault-injecting proxy in front of it.

`S3` is started once per test session (`s3_server` in test modules) on a free port; every
test takes a fresh prefix of one bucket (`S3.url()`). `FaultProxy` forwards HTTP requests to
it, logging each (method, path) and, when armed, failing the N-th matching request once or
from then on: an HTTP 500 or 503, a connection reset after half of the request body was read
(mid-upload), a slow answer, a lost answer (the request is done, the client gets a 503), or an object
that vanishes (deleted just before the request reaches it). No traffic goes to any address but 127.0.0.1.
"""

from __future__ import annotations

import datetime
import http.client
import logging
import socket
import struct
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUCKET = "oj-replica-tests"
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def options(endpoint: str, **extra) -> dict:
    return {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test",
            "region": "us-east-1", "client_options": {"allow_http": True}, **extra}


def fault_options(endpoint: str) -> dict:
    """Options for a store behind the proxy: the client's own retries short, so that the
    journal's retries are the ones tested."""
    return options(endpoint, retry_config={
        "max_retries": 1, "retry_timeout": datetime.timedelta(seconds=2),
        "backoff": {"init_backoff": datetime.timedelta(milliseconds=10),
                    "max_backoff": datetime.timedelta(milliseconds=50), "base": 2}})


class S3:
    def __init__(self):
        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.server = ThreadedMotoServer(ip_address=HOST, port=self.port, verbose=False)
        self.server.start()
        self.client().create_bucket(Bucket=BUCKET)

    def client(self, endpoint: str | None = None):
        import boto3
        return boto3.client("s3", endpoint_url=endpoint or self.endpoint, aws_access_key_id="test",
                            aws_secret_access_key="test", region_name="us-east-1")

    @staticmethod
    def prefix() -> str:
        return f"runs/{uuid.uuid4().hex}"

    @staticmethod
    def url(prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def listing(self, prefix: str) -> dict[str, datetime.datetime]:
        """Every object under `prefix` (relative name -> when it was created)."""
        c, out, token = self.client(), {}, None
        while True:
            kw = {"Bucket": BUCKET, "Prefix": prefix + "/"}
            if token:
                kw["ContinuationToken"] = token
            page = c.list_objects_v2(**kw)
            out.update((item["Key"][len(prefix) + 1:], item["LastModified"]) for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def keys(self, prefix: str) -> dict[str, bytes]:
        """Every object under `prefix` (relative name -> bytes)."""
        c = self.client()
        return {name: c.get_object(Bucket=BUCKET, Key=f"{prefix}/{name}")["Body"].read()
                for name in self.listing(prefix)}

    def put(self, prefix: str, name: str, body: bytes) -> None:
        self.client().put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body)

    def delete(self, prefix: str, name: str) -> None:
        self.client().delete_object(Bucket=BUCKET, Key=f"{prefix}/{name}")

    def stop(self) -> None:
        self.server.stop()


class FaultProxy:
    """HTTP proxy on 127.0.0.1 in front of `upstream_port`; see the module docstring."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.log: list[tuple[str, str]] = []
        self.kind: str | None = None      # "500", "503", "reset", "slow" or "down" (every request)
        self.nth = 0
        self.persistent = False
        self.methods: set[str] | None = None
        self.path_contains = ""
        self.matched = 0
        self.injected = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer((HOST, free_port()), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{HOST}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arm(self, kind: str, nth: int = 1, *, persistent: bool = False, methods=None,
            path_contains: str = "") -> None:
        """Fail the `nth` request (of `methods`, whose path contains `path_contains`) once, or
        every one from it on (`persistent`)."""
        with self._lock:
            self.kind, self.nth, self.persistent = kind, nth, persistent
            self.methods = set(methods) if methods else None
            self.path_contains = path_contains
            self.matched = self.injected = 0

    def heal(self) -> None:
        with self._lock:
            self.kind = None

    def _fault_for(self, method: str, path: str) -> str | None:
        with self._lock:
            if self.kind is None or (self.methods is not None and method not in self.methods) \
                    or self.path_contains not in path:
                return None
            self.matched += 1
            if self.matched == self.nth or (self.persistent and self.matched > self.nth):
                self.injected += 1
                return self.kind
            return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        fault = self._fault_for(h.command, h.path)
        if fault == "reset":
            h.rfile.read(length // 2)
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
            return
        body = h.rfile.read(length) if length else b""
        with self._lock:
            self.log.append((h.command, h.path))
        if fault in ("500", "503"):
            h.send_response(int(fault))
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if fault == "slow":
            time.sleep(1.5)
        if fault == "vanish":  # the object is deleted just before this request reaches it
            self._forward_as(h, "DELETE", b"")
        if fault == "lost-answer":  # the store does the request, the client never hears back
            self._forward(h, body)
            h.send_response(503)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._forward(h, body, answer=True)

    def _forward_as(self, h: BaseHTTPRequestHandler, method: str, body: bytes):
        conn = http.client.HTTPConnection(HOST, self.upstream_port, timeout=30)
        headers = {k: v for k, v in h.headers.items() if k.lower() != "connection"}
        if method != h.command:
            kept = ("host", "authorization", "x-amz-date")
            headers = {k: v for k, v in headers.items() if k.lower().startswith(kept)}
        conn.request(method, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp, data

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes, answer: bool = False) -> None:
        resp, data = self._forward_as(h, h.command, body)
        if not answer:
            return
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                h.send_header(k, v)
        length = resp.getheader("Content-Length") if h.command == "HEAD" else None
        h.send_header("Content-Length", length or str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def requests(self, since: int = 0) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.log[since:])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
