"""Pulumi entry point: validate the stack's config, then compose the track it names.

`pulumi up` and the offline plan (`make plan`) both run exactly this file.
"""

import pulumi

from components.checks import preflight, registry
from components.config import ConfigError, load_config
from components.plan.capacity import serving_capacity
from components.plan.engines import check_engine
from components.plan.limits import check as check_limits
from stacks import compose

try:
    config = load_config()
    check_engine(config)  # the pinned engine registers the checkpoint's architecture and accepts the settings
    serving_capacity(config)  # rejects replicas whose weights or one full-length sequence do not fit
    check_limits(config)  # every count a cloud or chart caps and the stack drives (components/plan/limits.py)
    # The checkpoint bucket: created, taken back after a destroy kept it, or shared with another stack of the
    # project; someone else's stops here, in one line (components/checks/preflight.py find_bucket).
    config = config.model_copy(update={"bucket_use": preflight.bucket_use(config, pulumi.get_stack())})
    # Every image by digest: the configured one, else the one its registry names for the pinned tag now.
    config = registry.pinned(config)
except ConfigError as err:
    # RunError ends the program with this one line and no traceback; nothing has been registered.
    raise pulumi.RunError(str(err)) from None

if preflight.gate_applies(config):  # `pulumi up` only: before any resource, so a failed check creates nothing
    failed = preflight.gate(config, pulumi.get_stack())
    if failed:
        raise pulumi.RunError(preflight.gate_message(failed))

for warning in config.warnings:  # keys with no effect in a shared file, placeholders still in place
    pulumi.log.warn(warning.removeprefix("warning: "))

compose(config)
