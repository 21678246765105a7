"""Typed building blocks of the stack: one concept per module.

Non-resource modules: `catalog` (hardware and model facts with sources), `config` (typed stack
settings), `naming` (labels). Each other module holds one ComponentResource with a documented
args model.
"""
