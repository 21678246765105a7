"""Ask the served model one question and watch the answer stream, with time to first token and tokens/s.

    python -m tools ask --stack gpu "Why is the sky blue?"
    python -m tools ask --stack tpu --long-context 200000 "What is the code word?"
    python -m tools ask --endpoint http://127.0.0.1:8080 "Hello"      # any OpenAI-compatible server

With --stack it reads the stack's outputs (`pulumi stack output --json --show-secrets`, run beside
Pulumi.yaml). Standalone router mode: it port-forwards the router Service (`routerService`, port 80) with
the stack's own kubeconfig for as long as the request runs, so nothing is exposed. Gateway mode: it sends
to the Gateway's address, which is internal on the default `gke-l7-rilb` class, so run it from inside
the VPC (or give --endpoint). --long-context N hides a code word at the start of about N tokens of filler
text and asks for it at the end: the answer shows whether the whole prompt was read.

The request is a streaming chat completion (`stream: true`, `stream_options.include_usage: true`, as in
vLLM's and SGLang's OpenAI-compatible servers). Answer text goes to stdout; timings and errors to stderr.
Exit code 0 after a complete answer, 1 on any failure (one line saying what and where), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from components.facts import catalog, contract  # noqa: E402
from tools import deprecated, prog  # noqa: E402

OUTPUTS_TIMEOUT_S = 120
CODE_WORD = "aubergine-7"
FILLER = ("Section {i}. The archive keeps its ledgers in order; each page records the weather, the harvest "
          "and the names of the ships that came into the harbour that week. ")
WORDS_PER_TOKEN = 0.75
"""About 3 words per 4 tokens for English text with a BPE tokenizer (a rough figure: the server's own
`usage.prompt_tokens` is printed next to it)."""


class AskError(Exception):
    """A failure reported to the user as one line."""


class MissingToolError(AskError):
    """A CLI the lookup needs is not installed: nothing was started (exit 2, tools/__main__.py)."""


class Cluster(Protocol):
    """What the endpoint lookup needs from kubectl (tools.live.bench.KubectlCluster provides it)."""

    def connect(self, kubeconfig: str) -> None: ...
    def port_forward(self, namespace: str, target: str, port: int) -> AbstractContextManager[str]: ...
    def gateway_address(self, namespace: str, gateway: str) -> str: ...


def stack_outputs(stack: str, cwd: Path = ROOT) -> dict[str, Any]:
    """The stack's outputs through the Pulumi CLI (the kubeconfig holds no credential, but it is a secret)."""
    try:
        proc = subprocess.run(["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack],
                              cwd=cwd, capture_output=True, text=True, timeout=OUTPUTS_TIMEOUT_S)
    except FileNotFoundError:
        raise MissingToolError("the pulumi CLI is not on PATH (https://www.pulumi.com/docs/install/); "
                       "or give --endpoint") from None
    except subprocess.TimeoutExpired:
        raise AskError(f"pulumi stack output --stack {stack} took over {OUTPUTS_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise AskError(f"pulumi stack output --stack {stack}: {(proc.stderr or proc.stdout).strip()[:300]}")
    outputs = json.loads(proc.stdout or "{}")
    if not outputs:
        raise AskError(f"stack {stack} has no outputs: run `pulumi up -s {stack}` first")
    return outputs


@contextmanager
def router_endpoint(outputs: dict[str, Any], cluster: Cluster) -> Iterator[str]:
    """The URL to send requests to, valid while the context is open."""
    missing = [k for k in ("routerMode", "namespace", "kubeconfig") if k not in outputs]
    if missing:
        raise AskError(f"stack outputs lack {', '.join(missing)}: run `pulumi up` with this version first")
    cluster.connect(outputs["kubeconfig"])
    namespace = outputs["namespace"]
    if outputs["routerMode"] == "gateway":
        yield f"http://{cluster.gateway_address(namespace, outputs['gatewayName'])}"
        return
    with cluster.port_forward(namespace, f"svc/{outputs['routerService']}", contract.ROUTER_SERVICE_PORT) as url:
        yield url


def haystack(tokens: int, question: str) -> str:
    """About `tokens` tokens of numbered filler, the code word at the very start and the question at the end."""
    words_per_section = len(FILLER.split())
    sections = max(1, round(tokens * WORDS_PER_TOKEN / words_per_section))
    body = "".join(FILLER.format(i=i + 1) for i in range(sections))
    return (f"Remember this code word: {CODE_WORD}.\n\n{body}\n\n{question} "
            "(The code word was given at the very start of this message; answer with it.)")


@dataclass
class Answer:
    text: str = ""
    reasoning: str = ""
    chunks: int = 0
    first_token_s: float | None = None
    last_token_s: float | None = None
    total_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def output_tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.chunks

    @property
    def tokens_per_second(self) -> float | None:
        """Decode rate: tokens after the first over the time after the first."""
        if self.first_token_s is None or self.last_token_s is None or self.output_tokens < 2:
            return None
        span = self.last_token_s - self.first_token_s
        return (self.output_tokens - 1) / span if span > 0 else None


def stream_chat(endpoint: str, model: str, prompt: str, max_tokens: int, timeout_s: float,
                out: TextIO, clock: Callable[[], float] = time.monotonic) -> Answer:
    import requests

    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    url = endpoint.rstrip("/") + "/v1/chat/completions"
    answer = Answer()
    start = clock()
    try:
        with requests.post(url, json=body, stream=True, timeout=(10, timeout_s)) as response:
            if response.status_code >= 400:
                raise AskError(f"{url} answered {response.status_code}: {response.text.strip()[:300]}")
            in_reasoning = False
            # Each event must be handed over as it arrives: a chunked stream (what vLLM's and SGLang's servers
            # send) yields chunk by chunk with chunk_size=None; a stream that just ends at close is read
            # byte by byte, since any larger read would wait for later tokens.
            chunked = "chunked" in response.headers.get("Transfer-Encoding", "").lower()
            for raw in response.iter_lines(chunk_size=None if chunked else 1, decode_unicode=True):
                if not raw or not raw.startswith("data:"):
                    continue
                data = raw[len("data:"):].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    raise AskError(f"{url} streamed an error: {json.dumps(chunk['error'])[:300]}")
                usage = chunk.get("usage") or {}
                answer.prompt_tokens = usage.get("prompt_tokens", answer.prompt_tokens)
                answer.completion_tokens = usage.get("completion_tokens", answer.completion_tokens)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    thinking = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    text = delta.get("content") or ""
                    if not (thinking or text):
                        continue
                    now = clock() - start
                    answer.first_token_s = answer.first_token_s if answer.first_token_s is not None else now
                    answer.last_token_s = now
                    answer.chunks += 1
                    if thinking:
                        out.write(("" if in_reasoning else "[thinking] ") + thinking)
                        in_reasoning = True
                        answer.reasoning += thinking
                    if text:
                        out.write(("\n[answer] " if in_reasoning else "") + text)
                        in_reasoning = False
                        answer.text += text
                    out.flush()
    except requests.exceptions.Timeout:
        raise AskError(f"{url}: no answer within {timeout_s:.0f} s (--read-timeout)") from None
    except requests.exceptions.ConnectionError as err:
        cause = err.__context__ or err.__cause__ or err
        while getattr(cause, "reason", None) is not None and cause is not cause.reason:  # urllib3 wraps the OSError
            cause = cause.reason
        detail = str(cause).rsplit(": ", 1)[-1] if str(cause) else type(cause).__name__
        raise AskError(f"cannot reach {url}: {detail} (is the port-forward or the Gateway address up?)") from None
    except json.JSONDecodeError as err:
        raise AskError(f"{url} streamed something that is not JSON: {err}") from None
    answer.total_s = clock() - start
    out.write("\n")
    if answer.first_token_s is None:
        raise AskError(f"{url} closed the stream without any text")
    return answer


def report(answer: Answer, err: TextIO, long_context: int | None) -> None:
    rate = answer.tokens_per_second
    prompt = f", prompt {answer.prompt_tokens:,} tokens" if answer.prompt_tokens is not None else ""
    counted = "" if answer.completion_tokens is not None else " (counted as stream chunks: no usage reported)"
    err.write(f"time to first token {answer.first_token_s:.2f} s; {answer.output_tokens} output tokens{counted} "
              f"in {answer.total_s:.2f} s"
              + (f", {rate:.1f} tokens/s after the first" if rate is not None else "") + f"{prompt}\n")
    if long_context:
        found = CODE_WORD in answer.text or CODE_WORD in answer.reasoning
        err.write(f"long context: code word {'found' if found else 'NOT found'} in the answer\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog("ask"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", help="the question")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", metavar="NAME", help="Pulumi stack to find the router from (its outputs)")
    where.add_argument("--endpoint", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080")
    parser.add_argument("--model", default=None, help=f"served model name (default: the stack's, else "
                                                      f"{catalog.KIMI.hf_id})")
    parser.add_argument("--max-tokens", type=int, default=512, help="answer length limit (default %(default)s)")
    parser.add_argument("--long-context", type=int, metavar="TOKENS",
                        help="wrap the question in about TOKENS tokens of text with a code word to recall")
    parser.add_argument("--read-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="longest wait for the next part of the answer (seconds, default %(default)s; "
                             "was --timeout)")
    deprecated(parser, "--timeout", "--read-timeout", type=float)
    return parser


def main(argv: Sequence[str] | None = None, cluster_factory: Callable[[], Cluster] | None = None,
         outputs_reader: Callable[[str], dict[str, Any]] = stack_outputs,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = build_parser().parse_args(argv)
    if args.max_tokens < 1 or args.read_timeout <= 0 or (args.long_context is not None and args.long_context < 1):
        err.write("error: --max-tokens, --read-timeout and --long-context must be positive\n")
        return 2
    try:
        outputs = outputs_reader(args.stack) if args.stack else {}
        model = args.model or outputs.get("servedModel") or catalog.KIMI.hf_id
        context = outputs.get("contextLength")
        if args.long_context and context and args.long_context > int(context):
            raise AskError(f"--long-context {args.long_context} exceeds the served context of {context} tokens")
        prompt = haystack(args.long_context, args.prompt) if args.long_context else args.prompt
        if args.endpoint:
            endpoint_cm: AbstractContextManager[str] = nullcontext(args.endpoint)
        else:
            if cluster_factory is None:
                from tools.live.bench import KubectlCluster

                cluster_factory = KubectlCluster
            endpoint_cm = router_endpoint(outputs, cluster_factory())
        with endpoint_cm as endpoint:
            err.write(f"asking {model} at {endpoint}" + (f" ({args.stack}, {outputs.get('routerMode')} router)"
                                                       if args.stack else "") + "\n")
            answer = stream_chat(endpoint, model, prompt, args.max_tokens, args.read_timeout, out)
        report(answer, err, args.long_context)
        return 0
    except AskError as problem:
        err.write(f"error: {problem}\n")
        return 2 if isinstance(problem, MissingToolError) else 1
    except FileNotFoundError as problem:  # kubectl (or its auth plugin) for the port-forward
        err.write(f"error: {problem.filename or problem} is not on PATH; or give --endpoint\n")
        return 2
    except Exception as problem:  # kubectl and Pulumi failures surface as one line too
        err.write(f"error: {type(problem).__name__}: {str(problem).strip().splitlines()[0] if str(problem) else ''}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
