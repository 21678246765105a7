"""CrossGuard policy pack `kimi-k3-1-policies`: `pulumi preview -s <stack> --policy-pack policy`.

The rules live in `rules.py` as pure functions (unit-tested in tests/policy/test_policy.py). Constructing
`PolicyPack` starts the analyzer's gRPC server and blocks, so nothing else imports this file.
"""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack

# The policy runtime executes this folder as a program; make `rules` importable however it is launched.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rules import POLICIES  # noqa: E402

PolicyPack(
    name="kimi-k3-1-policies",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
)
