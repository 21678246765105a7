"""vLLM 0.33.0's own start-up configuration from the GPU pods' argv: `vllm serve`'s parser
(vllm/entrypoints/common/cli_args.py `make_arg_parser`), `EngineArgs.from_cli_args` and `create_engine_config`
(vllm/engine/arg_utils.py), which runs every config's `__post_init__`/`verify_*` and VllmConfig's, CUDA graph sizing
(vllm/config/vllm.py `_set_cudagraph_sizes`) included; then the released CUDA graph dispatcher
(vllm/v1/cudagraph_dispatcher.py) on the sizes it kept.

What is supplied rather than run, each because this CPU machine cannot answer it: the device answers of a GB300
(CUDA device type, hybrid KV cache and static graph support, SM100 family, 288 GB, its name), the model as
write_model_config's config.json in place of the weights volume, `--skip-tokenizer-init` and no `--reasoning-parser`
(the parser is built from the model's tokenizer, which is not here), and the pod's shell variables (the leader
address, START_RANK per worker index)."""

from __future__ import annotations

import pytest

from components.plan import engines
from components.plan.parallel import layout
from tests.engine.conftest import stack_config, write_model_config

GB300_BYTES = 288 * 10**9
"""A GB300's HBM (https://www.nvidia.com/en-us/data-center/gb300-nvl72/: 288 GB per GPU); vLLM reads it only to pick
its batch defaults (>= 160 GiB: arg_utils.py `get_batch_defaults`)."""


@pytest.fixture()
def gb300(monkeypatch):
    """The device answers the config path asks of the CUDA platform, on vLLM's placeholder platform object."""
    from vllm.platforms import current_platform

    for name, value in (("device_type", "cuda"), ("support_hybrid_kv_cache", lambda: True),
                        ("support_static_graph_mode", lambda: True),
                        # vllm/platforms/cuda.py `is_cumem_allocator_available` (the pods pass --enable-cumem-allocator)
                        ("is_cumem_allocator_available", lambda: True),
                        ("is_device_capability_family", lambda family, device_id=0: family == 100),
                        ("is_device_capability", lambda capability, device_id=0: capability in ((10, 3), 103)),
                        ("get_device_total_memory", lambda device_id=0: GB300_BYTES),
                        ("get_device_name", lambda device_id=0: "NVIDIA GB300")):
        monkeypatch.setattr(current_platform, name, value, raising=False)
    return current_platform


def serve_argv(cfg, role: str, worker: int, model_dir, extra: tuple[str, ...] = ()) -> list[str]:
    """The role's `vllm serve` argv for worker `worker`, with the offline substitutions the module docstring lists."""
    argv = list(engines.vllm_command(cfg, role).argv)
    assert argv[:2] == ["vllm", "serve"]
    local = int(argv[argv.index("--data-parallel-size-local") + 1])
    values = {engines.LEADER: "10.0.0.1", engines.START_RANK: str(worker * local)}
    argv = [str(model_dir) if a == cfg.model.path else values.get(a, a) for a in argv[2:]]
    assert not [a for a in argv if "$" in a], argv
    i = argv.index("--reasoning-parser")
    del argv[i:i + 2]
    return [*argv, "--skip-tokenizer-init", *extra]


def engine_config(cfg, role: str, worker: int, tmp_path, extra: tuple[str, ...] = ()):
    """(VllmConfig, parsed args) as `vllm serve` builds them for that pod."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    write_model_config(cfg, tmp_path)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(serve_argv(cfg, role, worker, tmp_path, extra))
    args.model = args.model_tag  # vllm/entrypoints/cli/serve.py L56-57
    return AsyncEngineArgs.from_cli_args(args).create_engine_config(UsageContext.OPENAI_API_SERVER), args


def _nodes(cfg, role: str) -> int:
    return cfg.gpu.prefillNodesPerGroup if role == "prefill" else cfg.gpu.decodeNodesPerGroup


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_vllm_accepts_every_pods_argv(gb300, tmp_path, role):
    """Every worker's command passes vLLM's validation and lands on the data-parallel layout the pods assume."""
    cfg = stack_config("gpu")
    local = layout(cfg).engines_per_node
    for worker in range(_nodes(cfg, role)):
        config, args = engine_config(cfg, role, worker, tmp_path)
        parallel = config.parallel_config
        assert (parallel.data_parallel_rank, parallel.data_parallel_size_local) == (worker * local, local)
        assert parallel.data_parallel_hybrid_lb and not parallel.data_parallel_external_lb
        assert parallel.data_parallel_master_ip == "10.0.0.1"
        assert config.scheduler_config.max_num_seqs == int(args.max_num_seqs)
        assert config.scheduler_config.enable_chunked_prefill
        assert not config.scheduler_config.disable_hybrid_kv_cache_manager
        assert config.cache_config.mamba_cache_mode == "align"
        assert args.enable_scale_out == (role == "prefill")


def _dispatch(config, requests: int):
    """(runtime mode, requests) the released dispatcher gives a uniform decode step of `requests` requests."""
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    query = config.uniform_decode_query_len
    dispatcher = CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(config.compilation_config.cudagraph_mode, query)
    mode, batch = dispatcher.dispatch(requests * query, uniform_decode=True)
    return mode, batch.num_reqs


@pytest.mark.parametrize("changes", [{}, {"gpu.tensorParallel": "2"}])
def test_the_largest_decode_batch_runs_a_full_cuda_graph(gb300, tmp_path, changes):
    """Decode as llm-d's GB200 pods run it (components/plan/engines.py DECODE_COMPILATION): nothing torch.compiled,
    full graphs of uniform decode batches only; --max-num-seqs requests decoding at once (the most the KV pool
    holds) replay a FULL graph of exactly that batch, smaller batches one padded to at most it, within the 512-token
    budget."""
    from vllm.config import CompilationMode, CUDAGraphMode

    cfg = stack_config("gpu", **changes)
    config, _ = engine_config(cfg, "decode", 0, tmp_path)
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
    assert config.compilation_config.mode == CompilationMode.NONE
    assert config.scheduler_config.max_num_batched_tokens == engines.DECODE_BATCHED_TOKENS
    assert config.model_config.enable_cumem_allocator
    most = config.scheduler_config.max_num_seqs
    for requests in (1, most - 1, most):
        mode, padded = _dispatch(config, requests)
        assert mode == CUDAGraphMode.FULL and requests <= padded <= most, (requests, mode, padded)
    assert _dispatch(config, most) == (CUDAGraphMode.FULL, most)


def test_prefill_runs_eager(gb300, tmp_path):
    """Prefill as llm-d's GB200 pods run it (--enforce-eager): vLLM compiles nothing and captures no graph, so its
    start has no compile or capture step to cache."""
    from vllm.config import CompilationMode, CUDAGraphMode

    config, _ = engine_config(stack_config("gpu"), "prefill", 0, tmp_path)
    assert config.model_config.enforce_eager and config.model_config.enable_cumem_allocator
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.NONE
    assert config.compilation_config.mode == CompilationMode.NONE


def test_a_capture_ceiling_at_the_batch_leaves_the_largest_batches_without_graphs(gb300, tmp_path):
    """Why the pods pass no --max-cudagraph-capture-size: vLLM rounds a ceiling of 55 down to its grid
    ("Truncating max_cudagraph_capture_size to 48"), and a step of 49-55 requests runs with no graph at all. The
    check above fails for such a command."""
    from vllm.config import CUDAGraphMode

    cfg = stack_config("gpu")
    most = int(engines.vllm_batch_flags(cfg, "decode")[1])
    config, _ = engine_config(cfg, "decode", 0, tmp_path, ("--max-cudagraph-capture-size", str(most)))
    assert config.compilation_config.max_cudagraph_capture_size == 48 < most
    assert _dispatch(config, most)[0] == CUDAGraphMode.NONE
    assert _dispatch(config, 48) == (CUDAGraphMode.FULL, 48)
