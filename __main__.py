"""Pulumi entry point: validate the stack's config, then compose the track it names.

`pulumi up` and the offline plan (`make plan`) both run exactly this file.
"""

import pulumi

from components.capacity import serving_capacity
from components.config import ConfigError, load_config
from components.engines import check_engine
from stacks import compose

try:
    config = load_config()
    check_engine(config)  # the pinned engine registers the checkpoint's architecture and accepts the settings
    serving_capacity(config)  # rejects replicas whose weights or one full-length sequence do not fit
except ConfigError as err:
    # RunError ends the program with this one line and no traceback; nothing has been registered.
    raise pulumi.RunError(str(err)) from None

for warning in config.warnings:  # keys with no effect in a shared file, placeholders still in place
    pulumi.log.warn(warning.removeprefix("warning: "))

compose(config)
