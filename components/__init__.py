"""The Pulumi program's building blocks, one folder per layer. A layer imports only the layers listed for it in
docs/architecture.md (tests/test_architecture.py holds the table), from the bottom up:

`facts` (hardware, model, pins, names both sides share) -> `config` (the typed stack settings) -> `plan` (what the
stack needs, computed from config and facts, no resources) -> `cloud` (project, network, cluster, node pools) ->
`observe` (scrape targets, dashboards, alerts) -> `platform` (namespace, controllers, pod security, network
policy) -> `weights`, `router`, `serving` (each on the layers below, none on another) -> `checks` (preflight and
the declared inventory the policy pack enforces).
"""
