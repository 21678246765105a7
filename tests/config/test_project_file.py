"""Pulumi.yaml's config schema, the typed models and the README's config table agree."""

from __future__ import annotations

import re

import yaml

from components.config import PROJECT, SECRET_KEYS, declared_keys
from tests.conftest import ROOT, STACKS
from tools.preview import schema


def test_pulumi_yaml_is_generated_from_the_models():
    assert (ROOT / "Pulumi.yaml").read_text() == schema.render(), "run `python -m tools schema --write`"


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
    assert readme == schema.readme_with_table(readme), "run `python -m tools schema --write`"
    table = readme.split(schema.TABLE_START)[1].split(schema.TABLE_END)[0]
    table_keys = set(re.findall(r"^\| `([\w.]+)` \|", table, flags=re.M))
    assert table_keys == set(declared_keys()) | set(SECRET_KEYS)


def test_committed_stack_files_use_only_project_keys():
    for stack in STACKS:
        config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
        assert all(key.startswith(f"{PROJECT}:") for key in config), stack



def secure_values(value, path: str = "") -> list[str]:
    """Paths of every `secure:` value in a stack document."""
    if isinstance(value, dict):
        if "secure" in value:
            return [path or "<root>"]
        return [hit for k, v in value.items() for hit in secure_values(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in secure_values(v, f"{path}[{i}]")]
    return []


def test_committed_stack_files_carry_no_secure_values():
    """A `secure:` value is ciphertext for one stack's key: a placeholder cannot be decrypted, and the first
    `pulumi preview` of a user who has not set the token yet would fail on it instead of on the CLI's
    "missing configuration value" for the required key (https://github.com/pulumi/pulumi/issues/21797)."""
    assert secure_values({"config": {"a:b": {"secure": "x"}, "a:c": [{"secure": "y"}]}}) == [
        "config.a:b", "config.a:c[0]"]
    for stack in STACKS:
        path = ROOT / f"Pulumi.{stack}.yaml"
        assert secure_values(yaml.safe_load(path.read_text())) == [], stack
        assert "secure:" not in path.read_text(), stack
        for key in SECRET_KEYS:
            assert f"{PROJECT}:{key}" not in yaml.safe_load(path.read_text())["config"], (stack, key)


def test_entry_points_run_after_every_definition():
    """`python -m tools.x` executes the `__main__` guard when it is reached: a definition after it is
    missing at run time although imports (and so tests) see it."""
    import ast

    for path in sorted((ROOT / "tools").rglob("*.py")):
        body = ast.parse(path.read_text()).body
        guards = [i for i, node in enumerate(body) if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert not guards or guards == [len(body) - 1], f"{path.name}: code after the __main__ guard"
