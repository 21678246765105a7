"""The weight copier shared by `python -m tools stage` and the staging Job `pulumi up` creates:
Hugging Face Hub revision -> gs://bucket/prefix/, streamed, parallel, verified, resumable.

Modules: `hub` (file list with the Hub's hashes, verified resumable byte streams), `bucket` (the
destination, its objects and the manifest), `progress` (periodic log lines), `copy` (the orchestration).
Heavy client libraries are imported by these modules only, never by the Pulumi program.
"""


class StagingError(Exception):
    """A failure the user can act on; the CLI prints its message as one line and exits 1."""


class IntegrityError(StagingError):
    """Bytes that do not match what the Hub publishes: nothing is written for that file."""
