"""`python -m tools replay` (tools/preview/replay.py): the routing table, the bar, and one line for a bad shape file."""

from __future__ import annotations

import pytest


def _shape_file(tmp_path, **changes) -> str:
    shape = {"name": "benchmark", "sessions": 4, "concurrency": 2, "turns": 3, "system_tokens": 4096,
             "system_shared": True, "first_input_tokens": 2048, "input_tokens": 2048, "output_tokens": 128, **changes}
    path = tmp_path / "shapes.yaml"
    path.write_text(__import__("yaml").safe_dump([shape]))
    return str(path)


def test_the_cli_prints_the_routing_table_and_checks_the_bar(tmp_path, capsys):
    """`python -m tools replay`: sessions under one 11,392-token block never hit in the former setup (hits land on
    whole blocks), so the bar fails with the figures named; the rendered 128-token matching on one endpoint per
    engine keeps them."""
    from tools.preview import replay as cli

    stack = ["--stack-file", "tests/stacks/Pulumi.gpu.yaml", "--shapes", _shape_file(tmp_path)]
    assert cli.main([*stack, "--check", "--choice", "former"]) == 1
    out, err = capsys.readouterr()
    assert "pod endpoints, prefix unit 11392" in out and "benchmark" in out and "below the bar" in err
    assert cli.main([*stack, "--check"]) == 0
    assert "engine endpoints, prefix unit 128" in capsys.readouterr().out


@pytest.mark.parametrize("change, says", [({"turns": 0}, "turns must be >= 1"), ({"colour": 1}, "unknown field"),
                                          ({"input_tokens": "many"}, "whole numbers")])
def test_a_bad_shape_file_is_one_line(tmp_path, capsys, change, says):
    from tools.preview import replay as cli

    assert cli.main(["--stack-file", "tests/stacks/Pulumi.gpu.yaml", "--shapes", _shape_file(tmp_path, **change)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_the_summary_is_one_line_per_stack(tmp_path, capsys):
    """`make plan` prints `python -m tools replay --summary --check`: the benchmark shape's line."""
    from tools.preview import replay as cli

    assert cli.main(["--stack-file", "tests/stacks/Pulumi.gpu.yaml", "--shapes", _shape_file(tmp_path),
                     "--summary", "--check"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("gpu: session replay (benchmark): ") and "of ideal hit tokens" in line
