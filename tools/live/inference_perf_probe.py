"""Load a benchmark config with the real inference-perf and build its data generator, offline.

Runs inside the inference-perf virtualenv (`make inference-perf`), not .venv, so it imports nothing from this
project:

    .venv-inference-perf/bin/python tools/live/inference_perf_probe.py CONFIG [CONFIG ...] --tokenizer-dir DIR

The Job reads Kimi's tokenizer from the weights volume; here a small word-level tokenizer written to DIR
stands in for it (the only change to the config), and HF_HUB_OFFLINE forbids any download. Prints one JSON
object per config, in order: what inference-perf made of it and the first request it would send, or
{"ok": false, "error": ...} when inference-perf refuses it (exit 1 if any was refused). Several configs in one
run share the one import of inference-perf and transformers, which is most of a probe's time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

VOCAB = 4096


def write_tokenizer(folder: Path) -> None:
    """A word-level tokenizer AutoTokenizer loads from disk."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 10**7}))


def probe(config_file: Path, tokenizer_dir: Path) -> dict[str, Any]:
    import yaml
    from inference_perf.config import DataGenType, read_config
    from inference_perf.datagen import ConversationReplayDataGenerator
    from inference_perf.utils import CustomTokenizer

    raw = yaml.safe_load(config_file.read_text())
    original = raw["tokenizer"]["pretrained_model_name_or_path"]
    write_tokenizer(tokenizer_dir)
    raw["tokenizer"]["pretrained_model_name_or_path"] = str(tokenizer_dir)
    local = tokenizer_dir / "config.yml"
    local.write_text(yaml.safe_dump(raw, sort_keys=False))

    config = read_config(str(local))
    if config.data.type != DataGenType.ConversationReplay:
        raise ValueError(f"data.type {config.data.type.value}: this probe builds conversation_replay only")
    tokenizer = CustomTokenizer(config.tokenizer)
    generator = ConversationReplayDataGenerator(config.api, config.data, tokenizer)  # as inference-perf's main

    first = generator.load_lazy_data(next(generator.get_data()))
    body = asyncio.run(first.to_request_body(config.server.model_name, 0, config.server.ignore_eos,
                                             config.api.streaming))
    return {
        "ok": True,
        "tokenizer": original,
        "load": {"type": config.load.type.value, "num_workers": config.load.num_workers,
                 "request_timeout": config.load.request_timeout,
                 "stages": [{"num_requests": s.num_requests, "concurrency_level": s.concurrency_level}
                            for s in config.load.stages]},
        "api": config.api.type.value,
        "server": config.server.type.value,
        "conversations": len(generator.blueprints),
        "turns": sorted({bp.num_turns for bp in generator.blueprints}),
        "output_tokens": sorted({n for bp in generator.blueprints for n in bp.turn_output_lens}),
        "first_request": {"model": body["model"], "max_tokens": body["max_tokens"], "stream": body["stream"],
                          "prompt_tokens": len(tokenizer.get_tokenizer().encode(body["prompt"]))},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inference_perf_probe", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, nargs="+")
    parser.add_argument("--tokenizer-dir", type=Path, required=True, help="where to write the stand-in tokenizer")
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    refused = 0
    for config in args.config:
        try:
            result = probe(config, args.tokenizer_dir)
        except Exception as exc:  # noqa: BLE001 - any refusal is the answer, reported as data
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            refused += 1
        print(json.dumps(result), flush=True)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
