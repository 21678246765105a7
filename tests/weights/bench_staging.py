"""Benchmark of the weight copier on loopback (not a test): throughput against a plain download of the same
bytes from the same fake Hub, and the copier's peak memory while it copies a file several times larger.

    .venv/bin/python -m tests.weights.bench_staging [--size-mib 1024] [--sink null|emulator] [--rounds 3] [--xet]
    .venv/bin/python -m tests.weights.bench_staging --pods 1,2,4 [--per-address-mbps 40]

Sharded mode runs that many copiers ("pods") on one folder at once, each bound to its own loopback address
(127.0.0.10, .11, ...) through huggingface_hub's client factory and requests' connection pools, against a fake
Hub that serves each client address at most --per-address-mbps, and reports the speed-up and how many copies
the Hub sent (1.00: leases kept every file to one download).

The copier runs as `python -m tools.live.stage_weights` (as the Job runs it) in a child process (its peak
RSS from wait4); the plain download is a streamed GET of the same file through huggingface_hub's own HTTP
session that keeps nothing (as its http_get does, with 1 MiB reads instead of 10 MiB: a little faster here),
in a child process too; with --xet both read the file through hf_xet from the fake Hub's CAS.
Sinks: `null` is a minimal Cloud Storage JSON API on loopback that checks CRC32C and discards the bytes (what
the copier costs itself); `emulator` is fake-gcs-server (its ingest, ~50 MB/s here, bounds the copy).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import google_crc32c

from tests.fakes.fakehub import FakeFile, FakeHub, FakeRepo, LoopbackServer
from tests.fakes.gcsemulator import GcsEmulator

ROOT = Path(__file__).resolve().parents[2]
REPO = "bench/Big-Model"
CPU: dict[str, float] = {}
HF_HOME = {"dir": ""}
"""The children's HF_HOME, a temporary folder for the run: hf_xet's caches and logs stay out of the user's."""


class NullGcs:
    """Just the calls the copier makes: list, get, resumable and multipart uploads (with ifGenerationMatch, which
    the leases need), delete, media download. Object bodies are discarded; their CRC32C is kept."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.sessions: dict[str, dict] = {}
        self.lock = threading.RLock()
        self.generation = 1000
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
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
            disable_nagle_algorithm = True  # headers and body are two writes (see tests/fakes/fakehub.py)

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
XET_DOWNLOAD = """
import sys, time
from hf_xet import XetFileInfo, XetSession
from huggingface_hub.file_download import get_hf_file_metadata
from huggingface_hub.utils import build_hf_headers
from huggingface_hub.utils._xet import refresh_xet_connection_info
data = get_hf_file_metadata(sys.argv[1]).xet_file_data
info = refresh_xet_connection_info(file_data=data, headers=build_hf_headers())
start, count = time.monotonic(), 0
group = XetSession().new_download_stream_group(endpoint=info.endpoint, token=info.access_token,
                                               token_expiry_unix_secs=info.expiration_unix_epoch)
for block in group.download_stream(XetFileInfo(data.file_hash, int(sys.argv[2]))):
    count += len(block)
print(count, time.monotonic() - start)
"""
"""--xet: hf_xet's own ordered stream of the same file from the same CAS, keeping nothing (hf_xet's defaults)."""


def process_cpu(pid: int) -> float:
    """CPU seconds a running process has used (/proc/<pid>/stat utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(command: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS and stdout of the child; its CPU and the fake Hub's (this process) in CPU."""
    start = time.monotonic()
    hub_cpu = process_cpu(os.getpid())
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # wait4 reaps the child and reports its own peak RSS (not the maximum over all children).
    stdout = proc.stdout.read()
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(command[:4])} failed: {stderr.decode().strip()[-500:]}")
    CPU[command[2] if command[1] == "-m" else "download"] = usage.ru_utime + usage.ru_stime
    CPU["hub"] = process_cpu(os.getpid()) - hub_cpu
    return time.monotonic() - start, usage.ru_maxrss * 1024, stdout.decode()


POD = """
import sys, httpx2, huggingface_hub, requests.adapters
from huggingface_hub.utils._http import hf_request_event_hook
address = sys.argv[1]
# The pod's egress address, one loopback address: huggingface_hub's own client factory (the API calls) and
# requests' connection pools (the file bytes, components/weights/copier/hub.py HubStream; also the Cloud Storage calls).
huggingface_hub.set_client_factory(lambda: httpx2.Client(
    event_hooks={"request": [hf_request_event_hook]}, follow_redirects=True, timeout=None,
    transport=httpx2.HTTPTransport(local_address=address)))
init_poolmanager = requests.adapters.HTTPAdapter.init_poolmanager
requests.adapters.HTTPAdapter.init_poolmanager = lambda self, *args, **kwargs: init_poolmanager(
    self, *args, **kwargs, source_address=(address, 0))
from tools.live.stage_weights import main
sys.exit(main(sys.argv[2:]))
"""
RATE = re.compile(r"transferred by this copier in \S+ \(([\d.,]+) (MB|GB)/s\)")


def copier_rate(out: str) -> float:
    """MB/s the copier reports for its own run (after its imports)."""
    match = RATE.search(out)
    return float(match.group(1).replace(",", "")) * (1000 if match.group(2) == "GB" else 1)


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def null_sink() -> tuple[subprocess.Popen, str]:
    """The null sink in its own process, so receiving uploads does not compete with the fake Hub's interpreter."""
    server = subprocess.Popen([sys.executable, "-m", "tests.weights.bench_staging", "--serve-null-gcs"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    return server, server.stdout.readline().strip()


def sharded(args: argparse.Namespace) -> int:
    """1, 2, 4 ... pods on one folder, each from its own loopback address, against a Hub capping each address."""
    files = {f"model-{i:05d}-of-{args.shard_files:05d}.safetensors": FakeFile(args.shard_file_mib << 20, seed=20 + i)
             for i in range(args.shard_files)}
    total = sum(f.size for f in files.values())
    hub = FakeHub({REPO: FakeRepo(files)}, per_client_bytes_s=args.per_address_mbps * 1e6)
    server, sink_url = null_sink()
    print(f"{len(files)} files, {total / 1e6:,.0f} MB; the Hub serves each client address at most "
          f"{args.per_address_mbps} MB/s; {load()}", flush=True)
    times: dict[int, float] = {}
    try:
        with hub:
            env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONWARNINGS": "ignore",
                   "HF_HOME": HF_HOME["dir"],
                   "STORAGE_EMULATOR_HOST": sink_url}
            env.pop("HF_TOKEN", None)
            windows: dict[int, float] = {}
            for pods in [int(p) for p in args.pods.split(",")]:
                served = hub.stats.bytes
                hub.stats.first_file_at = hub.stats.last_file_end_at = None
                start = time.monotonic()
                procs = [subprocess.Popen(
                    [sys.executable, "-c", POD, f"127.0.0.{10 + i}", "--repo-id", REPO,
                     "--revision", hub.repos[REPO].commit, "--dest", f"gs://bench/pods{pods}/", "--workers",
                     str(args.workers), "--shards", str(pods), "--shard-index", str(i), "--progress-seconds", "60"],
                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(pods)]
                outs = [proc.communicate(timeout=600) for proc in procs]
                times[pods] = time.monotonic() - start
                failed = [err.decode().strip()[-300:] for proc, (_, err) in zip(procs, outs, strict=True)
                          if proc.returncode]
                if failed:
                    raise SystemExit(f"{pods} pods: {failed[0]}")
                fetched = hub.stats.bytes - served
                windows[pods] = hub.stats.last_file_end_at - hub.stats.first_file_at
                first = min(times)
                print(f"{pods} pod(s): transfer {windows[pods]:.1f} s (first file request to last byte, at the Hub), "
                      f"{total / windows[pods] / 1e6:,.1f} MB/s aggregate, "
                      f"speed-up {windows[first] / windows[pods]:.2f}x; "
                      f"wall with process start {times[pods]:.1f} s (speed-up {times[first] / times[pods]:.2f}x); "
                      f"Hub sent {fetched / total:.2f} copies", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(load())
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the file copied (default 1024)")
    parser.add_argument("--sink", choices=("null", "emulator"), default="null")
    parser.add_argument("--xet", action="store_true",
                        help="the fake Hub serves the file through Xet too; both sides read it with hf_xet")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="alternating download/copy rounds (default 3)")
    parser.add_argument("--pods", default="", help="sharded mode: pod counts to run, e.g. 1,2,4")
    parser.add_argument("--per-address-mbps", type=float, default=40.0, help="sharded mode: the Hub's cap per address")
    parser.add_argument("--shard-files", type=int, default=8)
    parser.add_argument("--shard-file-mib", type=int, default=48)
    parser.add_argument("--serve-null-gcs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_null_gcs:
        print(NullGcs().url, flush=True)
        threading.Event().wait(3600)  # the benchmark terminates it
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-hf-home-") as home:
        HF_HOME["dir"] = home
        return sharded(args) if args.pods else single(args)


def single(args: argparse.Namespace) -> int:
    """Copier against plain download of one file, alternating rounds."""
    size = args.size_mib << 20
    print(f"fake Hub file: {args.size_mib} MiB (hashing it first) ...; {load()}", flush=True)
    big = FakeFile(size, seed=7)
    hub = FakeHub({REPO: FakeRepo({"model.safetensors": big, "config.json": FakeFile(1500, seed=8, lfs=False)})},
                  xet=args.xet)
    rows = []
    with hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONWARNINGS": "ignore",
               "HF_HOME": HF_HOME["dir"]}
        env.pop("HF_TOKEN", None)
        commit = hub.repos[REPO].commit
        url = f"{hub.url}/{REPO}/resolve/{commit}/model.safetensors"
        emulator = None
        if args.sink == "null":
            server, sink_url = null_sink()
        else:
            emulator = GcsEmulator("filesystem").__enter__()
            sink_url = emulator.url
            from google.cloud import storage  # noqa: PLC0415 - only for this sink

            os.environ["STORAGE_EMULATOR_HOST"] = sink_url
            storage.Client().create_bucket("bench")
        env["STORAGE_EMULATOR_HOST"] = sink_url
        try:
            for round_ in range(args.rounds):  # alternating, so both see the same share of a busy machine
                download_s, download_rss, out = run_child(
                    [sys.executable, "-c", XET_DOWNLOAD, url, str(size)] if args.xet else
                    [sys.executable, "-c", DOWNLOAD, url], env)
                count, inner_s = out.split()
                assert int(count) == size
                download_cpu, download_hub_cpu = CPU["download"], CPU["hub"]
                sink_cpu = process_cpu(server.pid) if emulator is None else 0.0
                copy_s, copy_rss, out = run_child(
                    [sys.executable, "-m", "tools.live.stage_weights", "--repo-id", REPO, "--revision", commit,
                     "--dest", f"gs://bench/round{round_}/", "--workers", str(args.workers),
                     "--progress-seconds", "60"], env)
                sink_cpu = process_cpu(server.pid) - sink_cpu if emulator is None else 0.0
                rows.append((size / float(inner_s) / 1e6, copier_rate(out), download_s, copy_s, download_cpu,
                             CPU["tools.live.stage_weights"], download_rss, copy_rss, download_hub_cpu, CPU["hub"],
                             sink_cpu))
                print(f"round {round_ + 1}: plain download {rows[-1][0]:,.0f} MB/s, copier {rows[-1][1]:,.0f} MB/s "
                      f"(ratio {rows[-1][1] / rows[-1][0]:.2f}); wall with process start {download_s:.1f} s vs "
                      f"{copy_s:.1f} s; CPU {download_cpu:.1f} s vs {rows[-1][5]:.1f} s; {load()}", flush=True)
        finally:
            if emulator is not None:
                emulator.__exit__(None, None, None)
            else:
                server.terminate()
                server.wait(timeout=10)
    ratios = sorted(r[1] / r[0] for r in rows)
    walls = sorted(r[2] / r[3] for r in rows)
    copy_rss = max(r[7] for r in rows)
    print(f"copier / plain download, median of {len(rows)} rounds: {ratios[len(ratios) // 2]:.2f} by each one's own "
          f"transfer rate, {walls[len(walls) // 2]:.2f} by wall time with process start (goal >= 0.9)")
    print(f"peak RSS: copier {copy_rss / 2**20:,.0f} MiB, plain download {max(r[6] for r in rows) / 2**20:,.0f} MiB; "
          f"file / copier peak RSS: {size / copy_rss:.1f}x (goal: file >= 4x RSS)")
    def per_gb(column: int) -> float:
        return sum(r[column] for r in rows) / len(rows) / (size / 1e9)

    print(f"CPU seconds per GB (processes, with start-up): download {per_gb(4):.2f} + the fake Hub {per_gb(8):.2f}; "
          f"copier {per_gb(5):.2f} + the fake Hub {per_gb(9):.2f} + the Cloud Storage sink {per_gb(10):.2f}; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
