"""Google Cloud underneath everything: project APIs, VPC and NAT, node and Workload Identity accounts, the GKE cluster
and its node pools, and `base` (the ComponentResource plumbing every layer above uses). Imports facts, config, plan.
"""
