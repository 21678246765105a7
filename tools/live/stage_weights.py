"""Copy a Hugging Face model repository at one commit into a Cloud Storage folder, verified and resumable.

    python -m tools stage --repo-id moonshotai/Kimi-K3.1-Pro --revision <40-hex commit> \\
        --dest gs://<bucket>/<prefix>/<commit>/ [--workers 16]

The staging Job `pulumi up` creates runs this same command. Environment: HF_TOKEN (token for gated
models), HF_ENDPOINT (another Hub), HF_HUB_DISABLE_XET=1 (read Xet-backed files over HTTP too; by default
they come through hf_xet), STORAGE_EMULATOR_HOST (a Cloud Storage emulator); Cloud Storage credentials are
the application-default ones. Exit status 0 only when the destination holds exactly the
files the Hub lists for the commit, each (of this copier's share) proven by this process: streamed from the Hub
with its SHA-256 checked and stored with a matching CRC32C, or read back from Cloud Storage and found to hash to
the Hub's SHA-256 or git blob id (records in the bucket are never trusted); 1 on a staging
failure, with one line saying what to do (also for a file name from the Hub that is not a safe object name,
and for objects in the folder that the copier did not write: it refuses them instead of deleting them); 2 on
bad arguments. The copier's records, leases and manifest go to FOLDER.copier/ beside the folder. A rerun
reads the stored files back and copies only those whose bytes are not the Hub's; several copiers may run on one
folder at once (leases), and --shards splits the files into balanced shares, one per copier.
Rate limits are waited out (Retry-After honoured up to 10 min a wait, never less than a 2 s floor with jitter, for up to
60 min and 300 answers without progress; long waits are logged).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import warnings

from tools import prog

OTEL_TRACES = "ENABLE_GCS_PYTHON_CLIENT_OTEL_TRACES"
NO_BUCKET_METADATA = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"
"""google-cloud-storage (3.17) has every new client fetch the bucket's metadata in a background thread, to label
OpenTelemetry spans; with its traces off (the default) no span is made, so the copier, which makes a client per
worker thread, turns the fetch off unless traces are on (one GET of the bucket per thread, which the staging
identity may not even be allowed)."""


def commit(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{40}", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a full 40-character commit hash (branches and tags move)")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog("stage"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo-id", required=True, help="model repository, e.g. moonshotai/Kimi-K3.1-Pro")
    parser.add_argument("--revision", required=True, type=commit, help="full 40-character commit hash to copy")
    parser.add_argument("--dest", required=True, help="gs://BUCKET/FOLDER/ to copy into (trailing '/')")
    parser.add_argument("--workers", type=int, default=8, help="files copied at once (default 8)")
    parser.add_argument("--shards", type=int, default=1,
                        help="copiers started together on this folder, e.g. the pods of an Indexed Job (default 1); "
                             "each proves its own share of the file list (balanced by bytes)")
    parser.add_argument("--shard-index", type=int, default=os.environ.get("JOB_COMPLETION_INDEX") or "0",
                        help="this copier's index among --shards (default: JOB_COMPLETION_INDEX, else 0)")
    parser.add_argument("--progress-seconds", type=float, default=10.0, metavar="SECONDS",
                        help="time between progress lines (default 10)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.shards < 1 or not 0 < args.progress_seconds < math.inf:
        parser.error("--workers, --shards and --progress-seconds must be positive (and finite)")
    if not 0 <= args.shard_index < args.shards:
        parser.error(f"--shard-index {args.shard_index}: between 0 and --shards - 1 ({args.shards - 1})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The client libraries load only now, so `--help` and argument errors need neither them nor a network.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    if not os.environ.get(OTEL_TRACES):
        os.environ.setdefault(NO_BUCKET_METADATA, "true")
    from components.weights.copier import StagingError
    from components.weights.copier.copy import stage

    def log(line: str) -> None:
        print(f"stage: {line}", flush=True)

    try:
        stage(args.repo_id, args.revision, args.dest, workers=args.workers, token=os.environ.get("HF_TOKEN") or None,
              log=log, progress_s=args.progress_seconds, shard=(args.shard_index, args.shards))
    except StagingError as err:
        print(f"{prog('stage')}: error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{prog('stage')}: interrupted; a rerun resumes where this one stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
