"""The engines' pods: the GPU DisaggregatedSet and the TPU LeaderWorkerSets (`modelservers`), the TPU engine image
built by Cloud Build (`engineimage`), the image pre-pull DaemonSet (`prepull`) and the benchmark Job (`benchmark`).
Imports facts, config, plan, cloud and platform.
"""
