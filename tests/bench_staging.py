"""Benchmark of the weight copier on loopback (not a test): throughput against a plain download of the same
bytes from the same fake Hub, and the copier's peak memory while it copies a file several times larger.

    .venv/bin/python -m tests.bench_staging [--size-mib 1024] [--sink null|emulator]

The copier runs as `python -m tools.live.stage_weights` (as the Job runs it) in a child process (its peak
RSS from wait4); the plain download is a streamed GET of the same file that keeps nothing, in a child process
too. Sinks: `null` is a minimal Cloud Storage JSON API on loopback that checks CRC32C and discards the bytes
(what the copier costs itself); `emulator` is fake-gcs-server (its ingest, ~50 MB/s here, bounds the copy).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import google_crc32c

from tests.fakehub import FakeFile, FakeHub, FakeRepo
from tests.gcsemulator import GcsEmulator

ROOT = Path(__file__).resolve().parent.parent
REPO = "bench/Big-Model"
CPU: dict[str, float] = {}


class NullGcs:
    """Just the calls the copier makes: list, get, resumable and multipart uploads (with ifGenerationMatch, which
    the leases need), delete, media download. Object bodies are discarded; their CRC32C is kept."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.sessions: dict[str, dict] = {}
        self.lock = threading.RLock()
        self.generation = 1000
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def resource(self, bucket: str, name: str, size: int, crc: bytes, metadata: dict) -> dict:
        with self.lock:
            self.generation += 1
            generation = str(self.generation)
        return {"kind": "storage#object", "bucket": bucket, "name": name, "size": str(size), "generation": generation,
                "metageneration": "1", "crc32c": base64.b64encode(crc).decode(), "metadata": metadata,
                "id": f"{bucket}/{name}/{generation}"}

    def precondition_fails(self, name: str, query: dict) -> bool:
        """ifGenerationMatch: 0 means "does not exist yet", else the current generation."""
        wanted = query.get("ifGenerationMatch", [None])[0]
        if wanted is None:
            return False
        current = self.objects.get(name)
        return (current["resource"]["generation"] if current else "0") != wanted

    def _handler(self):
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def reply(self, status: int, document=None, headers=()):
                data = json.dumps(document).encode() if document is not None else b""
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                listing = re.fullmatch(r"/storage/v1/b/([^/]+)/o", url.path)
                media = re.fullmatch(r"/download/storage/v1/b/([^/]+)/o/(.+)", url.path)
                single = re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", url.path)
                if single and unquote(single.group(2)) in sink.objects:
                    self.reply(200, sink.objects[unquote(single.group(2))]["resource"])
                elif listing:
                    prefix = query.get("prefix", [""])[0]
                    items = [o["resource"] for k, o in sink.objects.items() if k.startswith(prefix)]
                    self.reply(200, {"kind": "storage#objects", "items": items})
                elif media and unquote(media.group(2)) in sink.objects:
                    data = sink.objects[unquote(media.group(2))]["data"]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.reply(404, {"error": {"code": 404, "message": "Not Found"}})

            def do_DELETE(self):  # noqa: N802
                match = re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", urlsplit(self.path).path)
                sink.objects.pop(unquote(match.group(2)) if match else "", None)
                self.reply(204)

            def do_POST(self):  # noqa: N802
                url = urlsplit(self.path)
                bucket = re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", url.path).group(1)
                kind = parse_qs(url.query)["uploadType"][0]
                body = self.body()
                query = parse_qs(url.query)
                if kind == "resumable":
                    meta = json.loads(body or b"{}")
                    if sink.precondition_fails(meta["name"], query):
                        self.reply(412, {"error": {"code": 412, "message": "Precondition Failed"}})
                        return
                    session = uuid.uuid4().hex
                    sink.sessions[session] = {"bucket": bucket, "meta": meta, "crc": google_crc32c.Checksum(),
                                              "size": 0}
                    self.reply(200, {}, [("Location", f"{sink.url}/upload/session/{session}")])
                    return
                boundary = re.search(r'boundary="?([^";]+)"?', self.headers["Content-Type"]).group(1).encode()
                parts = [p for p in body.split(b"--" + boundary) if p.strip() not in (b"", b"--")]
                meta = json.loads(parts[0].split(b"\r\n\r\n", 1)[1])
                data = parts[1].split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
                with sink.lock:
                    if sink.precondition_fails(meta["name"], query):
                        resource = None
                    else:
                        resource = sink.resource(bucket, meta["name"], len(data),
                                                 google_crc32c.Checksum(data).digest(), meta.get("metadata", {}))
                        sink.objects[meta["name"]] = {"resource": resource, "data": data}
                if resource is None:
                    self.reply(412, {"error": {"code": 412, "message": "Precondition Failed"}})
                    return
                self.reply(200, resource)

            def do_PUT(self):  # noqa: N802
                session = sink.sessions[urlsplit(self.path).path.rsplit("/", 1)[1]]
                total = self.headers["Content-Range"].rsplit("/", 1)[1]
                remaining = int(self.headers.get("Content-Length", 0))
                while remaining:  # discard, keeping only the CRC32C and the count
                    piece = self.rfile.read(min(remaining, 1 << 20))
                    session["crc"].update(piece)
                    session["size"] += len(piece)
                    remaining -= len(piece)
                if total == "*" or int(total) != session["size"]:
                    self.reply(308, None, [("Range", f"bytes=0-{session['size'] - 1}")])
                    return
                meta = session["meta"]
                resource = sink.resource(session["bucket"], meta["name"], session["size"], session["crc"].digest(),
                                         meta.get("metadata", {}))
                sink.objects[meta["name"]] = {"resource": resource, "data": b""}
                self.reply(200, resource)

        return Handler


DOWNLOAD = """
import sys, time
from huggingface_hub.utils import get_session
start, count = time.monotonic(), 0
with get_session().stream("GET", sys.argv[1]) as response:
    for block in response.iter_bytes(1 << 20):
        count += len(block)
print(count, time.monotonic() - start)
"""


def run_child(command: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # wait4 reaps the child and reports its own peak RSS (not the maximum over all children).
    stdout = proc.stdout.read()
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(command[:4])} failed: {stderr.decode().strip()[-500:]}")
    CPU[command[2] if command[1] == "-m" else "download"] = usage.ru_utime + usage.ru_stime
    return time.monotonic() - start, usage.ru_maxrss * 1024, stdout.decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the file copied (default 1024)")
    parser.add_argument("--sink", choices=("null", "emulator"), default="null")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--serve-null-gcs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_null_gcs:
        print(NullGcs().url, flush=True)
        threading.Event().wait(3600)  # the benchmark terminates it
        return 0
    size = args.size_mib << 20
    print(f"fake Hub file: {args.size_mib} MiB (hashing it first) ...", flush=True)
    big = FakeFile(size, seed=7)
    hub = FakeHub({REPO: FakeRepo({"model.safetensors": big, "config.json": FakeFile(1500, seed=8, lfs=False)})})
    with hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONWARNINGS": "ignore"}
        env.pop("HF_TOKEN", None)
        commit = hub.repos[REPO].commit
        url = f"{hub.url}/{REPO}/resolve/{commit}/model.safetensors"
        download_s, download_rss, out = run_child([sys.executable, "-c", DOWNLOAD, url], env)
        assert int(out.split()[0]) == size
        if args.sink == "null":
            # Its own process, so receiving the upload does not compete with the fake Hub for one interpreter.
            server = subprocess.Popen([sys.executable, "-m", "tests.bench_staging", "--serve-null-gcs"], cwd=ROOT,
                                      stdout=subprocess.PIPE, text=True)
            sink_url = server.stdout.readline().strip()
            emulator = None
        else:
            emulator = GcsEmulator("filesystem").__enter__()
            sink_url = emulator.url
            from google.cloud import storage  # noqa: PLC0415 - only for this sink

            os.environ["STORAGE_EMULATOR_HOST"] = sink_url
            storage.Client().create_bucket("bench")
        try:
            env["STORAGE_EMULATOR_HOST"] = sink_url
            copy_s, copy_rss, out = run_child(
                [sys.executable, "-m", "tools.live.stage_weights", "--repo-id", REPO, "--revision", commit,
                 "--dest", "gs://bench/models/", "--workers", str(args.workers), "--progress-seconds", "5"], env)
            download_again_s, _, _ = run_child([sys.executable, "-c", DOWNLOAD, url], env)
        finally:
            if emulator is not None:
                emulator.__exit__(None, None, None)
            else:
                server.terminate()
                server.wait(timeout=10)
    plain = min(download_s, download_again_s)
    copied = size + 1500
    print(out.strip().splitlines()[-1])
    print(f"plain download: {size / plain / 1e6:,.0f} MB/s ({plain:.1f} s; best of two, before and after the copy), "
          f"peak RSS {download_rss / 2**20:,.0f} MiB")
    print(f"copier ({args.sink} sink, {args.workers} workers): {copied / copy_s / 1e6:,.0f} MB/s ({copy_s:.1f} s, "
          f"process start and imports included), peak RSS {copy_rss / 2**20:,.0f} MiB")
    print(f"throughput ratio copier / plain download: {plain / copy_s:.2f} (goal >= 0.7)")
    print("CPU seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in CPU.items()))
    print(f"file / copier peak RSS: {size / copy_rss:.1f}x (goal: file >= 4x RSS)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
