"""Typed stack configuration: every user setting, its type, default and the checks that need no cloud.

Keys live under the project namespace as flat dotted names (`kimi-k3-1:tpu.topology`), because a
Pulumi.yaml config schema only types scalars and arrays. `load_config()` turns the raw key/value map
into `StackConfig`; any problem becomes one `ConfigError` naming the full key, the value and what
would be valid. `Pulumi.yaml`'s `config:` block is generated from these models
(`python -m tools schema --write`) and a test keeps the two identical.

One module per section of the stack file: `cloud` (gcp, network, cluster, the CPU pools), `gpu`, `tpu`, `model`,
`storage`, `router`, `images`, `operations` (kubernetes, monitoring, benchmark, lifecycle, cost); `base` what they
share, `stack` the whole and its cross-section checks, `load` reading it. Imports facts only (components/facts/);
what is derived from the settings (the GPU parallel layout, sizes, command lines) is the plan's
(components/plan/).
"""

from __future__ import annotations

from .autoscaling import AutoscalingConfig
from .base import (
    BUCKET_NAMING,
    DEFAULT_PROVIDER_CONFIG,
    EXPLICIT_PROVIDERS,
    GCE_NAMING,
    GKE_CLUSTER_NAMING,
    PROJECT,
    PROJECT_ID_RULES,
    PROVIDER_NAMESPACES,
    SECRET_KEYS,
    SERVICE_ACCOUNT_ID_RULES,
    ConfigError,
    Section,
    check_bucket_name,
    default_cluster_name,
    for_track,
)
from .cloud import ClusterConfig, GcpConfig, NetworkConfig, NodePoolConfig, SystemPoolConfig, TransferPoolConfig
from .gpu import GpuConfig
from .images import ImagesConfig
from .load import check_namespaces, declared_keys, load_config, parse_config, raw_project_config
from .model import ModelConfig
from .operations import BenchmarkConfig, CostConfig, KubernetesConfig, LifecycleConfig, MonitoringConfig
from .router import RouterConfig
from .stack import GEOMETRY_FIELDS, INERT_WHEN, PLACEHOLDERS, SECTIONS, StackConfig
from .storage import StorageConfig
from .tpu import TpuConfig

__all__ = [
    'AutoscalingConfig', 'BUCKET_NAMING', 'BenchmarkConfig', 'ClusterConfig', 'ConfigError', 'CostConfig',
    'DEFAULT_PROVIDER_CONFIG',
    'EXPLICIT_PROVIDERS', 'GCE_NAMING', 'GEOMETRY_FIELDS', 'GKE_CLUSTER_NAMING', 'GcpConfig', 'GpuConfig',
    'INERT_WHEN', 'ImagesConfig', 'KubernetesConfig', 'LifecycleConfig', 'ModelConfig', 'MonitoringConfig',
    'NetworkConfig', 'NodePoolConfig', 'PLACEHOLDERS', 'PROJECT', 'PROJECT_ID_RULES', 'PROVIDER_NAMESPACES',
    'RouterConfig', 'SECRET_KEYS', 'SECTIONS', 'SERVICE_ACCOUNT_ID_RULES', 'Section', 'StackConfig',
    'StorageConfig', 'SystemPoolConfig', 'TpuConfig', 'TransferPoolConfig', 'check_bucket_name',
    'check_namespaces', 'declared_keys', 'default_cluster_name', 'for_track', 'load_config', 'parse_config',
    'raw_project_config',
]
