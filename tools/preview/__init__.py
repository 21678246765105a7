"""The offline preview engine: the real program under Pulumi's mock engine, Helm renders and the plan's
checks. It never imports tools.live (docs/architecture.md)."""
