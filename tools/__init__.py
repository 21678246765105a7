"""Project tools behind one CLI (`python -m tools <command>`): tools.preview is the offline preview engine,
tools.live the commands against a live stack, tools.staging the weight copier the staging Job ships."""
