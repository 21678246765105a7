"""Pulumi.yaml's config schema, the typed models and the README's config table agree."""

from __future__ import annotations

import re

import yaml

from components.config import PROJECT, SECRET_KEYS, declared_keys
from tests.conftest import ROOT, STACKS
from tools import schema


def test_pulumi_yaml_is_generated_from_the_models():
    assert (ROOT / "Pulumi.yaml").read_text() == schema.render(), "run `python -m tools.schema --write`"


def test_secret_keys_are_declared_secret():
    config = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    for key in SECRET_KEYS:
        assert config[key]["secret"] is True
        assert "default" not in config[key]


def test_defaults_match_types():
    config = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    python_types = {"string": str, "integer": int, "boolean": bool, "array": list}
    for key, entry in config.items():
        if "default" in entry:
            assert type(entry["default"]) is python_types[entry["type"]], key


def test_readme_documents_every_key():
    readme = (ROOT / "README.md").read_text()
    assert readme == schema.readme_with_table(readme), "run `python -m tools.schema --write`"
    table = readme.split(schema.TABLE_START)[1].split(schema.TABLE_END)[0]
    table_keys = set(re.findall(r"^\| `([\w.]+)` \|", table, flags=re.M))
    assert table_keys == set(declared_keys()) | set(SECRET_KEYS)


def test_committed_stack_files_use_only_project_keys():
    for stack in STACKS:
        config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
        assert all(key.startswith(f"{PROJECT}:") for key in config), stack
        assert config[f"{PROJECT}:hfToken"].keys() == {"secure"}, "the token is only ever a secure value"


def test_entry_points_run_after_every_definition():
    """`python -m tools.x` executes the `__main__` guard when it is reached: a definition after it is
    missing at run time although imports (and so tests) see it."""
    import ast

    for path in sorted((ROOT / "tools").glob("*.py")):
        body = ast.parse(path.read_text()).body
        guards = [i for i, node in enumerate(body) if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert not guards or guards == [len(body) - 1], f"{path.name}: code after the __main__ guard"
