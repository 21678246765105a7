"""The checkpoint, from the Hub to the volume the engines read: the bucket, the revision pinned once, the staging Job
and the copier it ships (`copier/`, with `shipped`: which file lands where in the pod), the Hyperdisk ML volume and
the staged config.json checked against the plan's geometry. Imports facts, config, plan, cloud and platform; the
copier imports only itself and its locked libraries, since the Job runs it from a ConfigMap.
"""
