"""The cluster platform the workloads stand on: the model namespace, its token Secret and the LeaderWorkerSet
controller (`namespace`), the GPU DRA driver (`dra`), the restricted pod settings and their exceptions
(`hardening`), and the namespace's NetworkPolicies (`netpol`, which admits observe's scrape targets). Imports facts,
config, plan, cloud and observe.
"""
