"""Commands users run against a live stack (ask, smoke, bench, report, stage, ...); they may import
tools.preview, never the reverse (docs/architecture.md)."""
