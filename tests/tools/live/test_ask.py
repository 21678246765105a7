"""tools.live.ask against a loopback OpenAI-compatible streaming server, and its endpoint lookup from stack outputs."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import ROOT
from tools.live import ask

FIRST_TOKEN_DELAY_S = 0.15
TOKEN_GAP_S = 0.01


class Fake:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.status = 200
        self.usage = True
        self.reasoning = False
        self.chunked = True
        self.first_token_delay = 0.0
        """Seconds between the role chunk and the first token: FIRST_TOKEN_DELAY_S where a test measures the time
        to first token, none elsewhere."""


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's spelling)
        fake: Fake = self.server.fake  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fake.requests.append({"path": self.path, "body": body})
        if self.path != "/v1/chat/completions" or fake.status != 200:
            payload = b'{"error": {"message": "model not found"}}'
            self.send_response(404 if self.path != "/v1/chat/completions" else fake.status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        prompt = body["messages"][-1]["content"]
        words = [ask.CODE_WORD] if ask.CODE_WORD in prompt else ["The", " sky", " scatters", " blue", " light", "."]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if fake.chunked:  # as uvicorn streams (vLLM, SGLang); else the body just ends when the connection closes
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if fake.chunked else data)
            self.wfile.flush()

        def send(obj: object) -> None:
            write(f"data: {json.dumps(obj)}\n\n".encode())

        send({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        time.sleep(fake.first_token_delay)
        if fake.reasoning:
            send({"choices": [{"index": 0, "delta": {"reasoning_content": "Thinking briefly."}}]})
        for word in words:
            send({"choices": [{"index": 0, "delta": {"content": word}}]})
            time.sleep(TOKEN_GAP_S)
        if fake.usage:
            send({"choices": [], "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}})
        write(b"data: [DONE]\n\n")
        if fake.chunked:
            self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def server() -> Iterator[tuple[Fake, str]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.fake = Fake()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield httpd.fake, f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()


def run(*argv: str, **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = ask.main(list(argv), out=out, err=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def test_help_works_offline():
    proc = subprocess.run([sys.executable, "-m", "tools.live.ask", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--stack" in proc.stdout and "--long-context" in proc.stdout


@pytest.mark.parametrize("chunked", [True, False])
def test_streams_the_answer_and_reports_ttft_and_rate(server, chunked):
    fake, url = server
    fake.chunked, fake.first_token_delay = chunked, FIRST_TOKEN_DELAY_S
    code, out, err = run("--endpoint", url, "--max-tokens", "64", "Why is the sky blue?")
    assert code == 0, err
    assert out.strip() == "The sky scatters blue light."
    body = fake.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "moonshotai/Kimi-K3.1-Pro" and body["max_tokens"] == 64
    line = [x for x in err.splitlines() if x.startswith("time to first token")][0]
    ttft = float(line.split("time to first token ")[1].split(" s")[0])
    assert FIRST_TOKEN_DELAY_S <= ttft < FIRST_TOKEN_DELAY_S + 2
    assert "6 output tokens" in line and "prompt 5 tokens" in line
    # Tokens arrive TOKEN_GAP_S apart: a rate far above 1/TOKEN_GAP_S means the client buffered the stream.
    rate = float(line.split(", ")[-2].split(" tokens/s")[0])
    assert 0 < rate < 2 / TOKEN_GAP_S, line


def test_without_usage_counts_chunks_and_says_so(server):
    fake, url = server
    fake.usage = False
    code, _, err = run("--endpoint", url, "Hi")
    assert code == 0, err
    assert "6 output tokens (counted as stream chunks: no usage reported)" in err


def test_reasoning_is_shown_apart_from_the_answer(server):
    fake, url = server
    fake.reasoning = True
    code, out, _ = run("--endpoint", url, "Hi")
    assert code == 0
    assert out.startswith("[thinking] Thinking briefly.\n[answer] The sky")


def test_long_context_request_recalls_the_code_word(server):
    fake, url = server
    code, _, err = run("--endpoint", url, "--long-context", "4000", "What is the code word?")
    assert code == 0, err
    prompt = fake.requests[0]["body"]["messages"][0]["content"]
    assert prompt.startswith(f"Remember this code word: {ask.CODE_WORD}.")
    assert 2500 <= len(prompt.split()) <= 3500  # about 4,000 tokens at 3 words per 4 tokens
    assert "long context: code word found" in err


def test_http_error_is_one_line(server):
    fake, url = server
    fake.status = 400
    code, _, err = run("--endpoint", url, "Hi")
    assert code == 1
    assert err.strip().splitlines()[-1] == (f"error: {url}/v1/chat/completions answered 400: "
                                            '{"error": {"message": "model not found"}}')


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_is_one_line():
    url = f"http://127.0.0.1:{closed_port()}"
    code, _, err = run("--endpoint", url, "--read-timeout", "5", "Hi")
    assert code == 1
    assert err.strip().splitlines()[-1].startswith(f"error: cannot reach {url}/v1/chat/completions")


class FakeCluster:
    def __init__(self, url: str):
        self.url, self.calls = url, []

    def connect(self, kubeconfig: str) -> None:
        self.calls.append(("connect", kubeconfig))

    @contextmanager
    def port_forward(self, namespace: str, target: str, port: int):
        self.calls.append(("port-forward", namespace, target, port))
        yield self.url
        self.calls.append(("closed",))

    def gateway_address(self, namespace: str, gateway: str) -> str:
        self.calls.append(("gateway", namespace, gateway))
        return self.url.removeprefix("http://")


OUTPUTS = {"routerMode": "standalone", "namespace": "kimi-k3-1", "routerService": "kimi-k3-1-epp",
           "kubeconfig": "{}", "servedModel": "moonshotai/Kimi-K3.1-Pro", "contextLength": 491520}


def test_standalone_stack_is_reached_through_a_port_forward_of_the_router(server):
    _, url = server
    cluster = FakeCluster(url)
    code, out, err = run("--stack", "tpu", "Hi", cluster_factory=lambda: cluster,
                         outputs_reader=lambda stack: dict(OUTPUTS))
    assert code == 0, err
    assert cluster.calls == [("connect", "{}"), ("port-forward", "kimi-k3-1", "svc/kimi-k3-1-epp", 80), ("closed",)]
    assert "(tpu, standalone router)" in err


def test_gateway_stack_is_reached_at_the_gateway_address(server):
    _, url = server
    cluster = FakeCluster(url)
    outputs = {**OUTPUTS, "routerMode": "gateway", "gatewayName": "llm-d-inference-gateway"}
    code, _, err = run("--stack", "gpu", "Hi", cluster_factory=lambda: cluster, outputs_reader=lambda s: outputs)
    assert code == 0, err
    assert ("gateway", "kimi-k3-1", "llm-d-inference-gateway") in cluster.calls


def test_long_context_beyond_the_served_context_is_refused():
    code, _, err = run("--stack", "tpu", "--long-context", "600000", "Hi", cluster_factory=lambda: None,
                       outputs_reader=lambda s: dict(OUTPUTS))
    assert code == 1
    assert err.strip() == "error: --long-context 600000 exceeds the served context of 491520 tokens"


def test_stack_without_outputs_is_one_line(tmp_path, monkeypatch):
    """The real reader, with a `pulumi` on PATH that prints no outputs (a stack that was never up)."""
    fake_pulumi = tmp_path / "pulumi"
    fake_pulumi.write_text("#!/bin/sh\necho '{}'\n")
    fake_pulumi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(ask.AskError, match=r"stack gpu has no outputs: run `pulumi up -s gpu` first"):
        ask.stack_outputs("gpu")


def test_stack_outputs_are_read_with_the_cli(tmp_path, monkeypatch):
    fake_pulumi = tmp_path / "pulumi"
    fake_pulumi.write_text("#!/bin/sh\necho \"$@\" > " + str(tmp_path / "args") + "\necho '{\"namespace\": \"x\"}'\n")
    fake_pulumi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert ask.stack_outputs("gpu") == {"namespace": "x"}
    assert (tmp_path / "args").read_text().split() == ["stack", "output", "--json", "--show-secrets", "--stack",
                                                        "gpu"]
