"""Facts with their sources: hardware and model (`catalog`, `machines`), pinned versions and images (`versions`),
prices, the image-reference grammar, the Prometheus names relied on (`metrics`), the names both sides of a
connection share (`contract`), address ranges (`cidrs`). Data, no Pulumi and no config: imports only other facts.
"""
