"""What the stack needs, computed once from config and facts: the GPU parallel layout, KV block size, what each rank
loads, capacity, the engines' command lines, the images by short name, cost, limits, the time to serving and the
staging Job's sizing. No resources and no Pulumi: imports facts and config only.
"""
