"""Write the hash-pinned lock the TPU engine image is built from (components/serving/engineimage.py).

vLLM-TorchTPU publishes no release image, so the stack builds one (Cloud Build, at `pulumi up`) from
`components/locks/vllm-torchtpu.txt` with `pip install --require-hashes --no-deps`: nothing unpinned or unverified
goes into it (docs/security.md). Regenerate after changing the pin:

    1. set the version in components/locks/vllm-torchtpu.in (and components/facts/versions.py VLLM_TORCHTPU)
    2. uv pip compile components/locks/vllm-torchtpu.in --python-version 3.12 \\
           --python-platform x86_64-manylinux_2_31 --format pylock.toml -o build/pylock.vllm-torchtpu.toml
       uv pip compile components/locks/vllm-torchtpu.in --python-version 3.12 \\
           --python-platform x86_64-manylinux_2_31 -o build/requirements.vllm-torchtpu.txt
       (manylinux_2_31: torch-tpu 0.2.0 publishes no older wheel; the second file only for its `# via` lines)
    3. python -m tools lock-tpu-engine build/pylock.vllm-torchtpu.toml build/requirements.vllm-torchtpu.txt

Step 3 keeps, per package, only the artifacts a CPython 3.12 manylinux x86_64 host installs (its wheels, or the
sdist where there is no wheel). It pins torch and torchvision to their CPU builds (`CPU_BUILDS`), as the engine's
own install does, and drops what only the CUDA build of torch pulled in (`cuda_only`: the nvidia-* libraries,
cuda-*, triton): a TPU host never loads them. It heads the lock with the bytes the build downloads, which the
image's size and the TPU pods' pull time are computed from (components/plan/loading.py `engine_image`).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
LOCK_DIR = ROOT / "components" / "locks"
LOCK = LOCK_DIR / "vllm-torchtpu.txt"
INPUT = LOCK_DIR / "vllm-torchtpu.in"
PYTHON = (3, 12)
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(31, 4, -1)] + ["manylinux2014_x86_64",
                                                                            "manylinux2010_x86_64",
                                                                            "manylinux1_x86_64", "linux_x86_64"]
SIZE_LINE = re.compile(r"^# download: ([0-9]+) bytes in ([0-9]+) files", re.M)
"""The lock's size line (components/plan/loading.py reads it)."""


@dataclass(frozen=True)
class CpuBuild:
    """A CPU build from PyTorch's CPU index, pinned by URL and hash: the lock names the file itself, so pip never
    weighs that index against PyPI for it."""

    version: str
    url: str
    sha256: str
    size: int | None
    """Bytes as quoted by a source; None: not quoted (the PyPI build's size stands in, an upper bound)."""
    source: str


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's CPU wheel index. The engine's README installs with CPU torch ("Use CPU Torch ...": `export
UV_TORCH_BACKEND=cpu`, https://github.com/kowalski-4831/vllm-torchtpu/blob/012e4f24a331c37d53769068cff5fb36617cd3aa/
README.md, section 2 option A), and uv's `cpu` backend is this index (the `+cpu` builds "are published on
https://download.pytorch.org/whl/cpu", https://docs.astral.sh/uv/guides/integration/pytorch). PyPI's Linux x86_64
torch is the CUDA build."""
HASH_SOURCE = ("the sha256 the index publishes in its file links, as quoted by independent public lock files "
               "(code search over public repositories, 2026-12); pip re-verifies it at build time "
               "(`--require-hashes`), so a wrong value fails the build and never installs other bytes")
CPU_BUILDS: dict[str, CpuBuild] = {
    "torch": CpuBuild("2.13.0+cpu", f"{CPU_INDEX}/torch-2.13.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl",
                      "4ca4a9394b0c771238a4f73590fdbbc4debad85ed0fa63d026ae1b085da7d6e2", 191_817_609,
                      HASH_SOURCE + "; size quoted with it"),
    "torchvision": CpuBuild("0.28.0+cpu",
                            f"{CPU_INDEX}/torchvision-0.28.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl",
                            "b545d46f4d2f9d30381281cf22874bfe1d32a8a7b0ee8396fccde89f30c6a9d9", None, HASH_SOURCE),
}
CPU_TORCH_REQUIRES = frozenset({"filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2",
                                "fsspec"})
"""Requires-Dist of torch 2.13.0+cpu without extras (its wheel's METADATA): what the CPU build still needs. The
CUDA build on PyPI adds the nvidia-* libraries, cuda-toolkit, cuda-bindings and triton."""
UNUSED_ON_TPU = frozenset({"triton"})
"""Also declared by another package, but never imported on a TPU host: xgrammar 0.2.9 requires triton on Linux
x86_64, and imports it only for logits on a CUDA device (xgrammar/matcher.py `apply_token_bitmask_inplace`, backend
"auto": cpu, cuda -> triton, npu, else torch_compile; https://pypi.org/project/xgrammar/0.2.9/)."""


def supported_tags() -> set[Tag]:
    return set(cpython_tags(PYTHON, platforms=PLATFORMS)) | set(compatible_tags(PYTHON, "cp312", PLATFORMS))


def chosen(package: dict, tags: set[Tag]) -> list[dict]:
    """The wheels a target host may pick, else the sdist."""
    wheels = [w for w in package.get("wheels", []) if tags & set(parse_wheel_filename(w["url"].rsplit("/", 1)[1])[3])]
    picked = wheels or ([package["sdist"]] if "sdist" in package else [])
    if not picked:
        raise SystemExit(f"error: {package['name']} {package['version']} has no artifact for CPython 3.12 on "
                         "manylinux x86_64")
    return picked


def artifacts(package: dict, tags: set[Tag]) -> list[str]:
    """sha256 hashes of the wheels a target host may pick, else of the sdist."""
    return sorted(a["hashes"]["sha256"] for a in chosen(package, tags))


def via(requirements: str) -> dict[str, set[str]]:
    """Package -> the packages that require it, from uv's `# via` annotations of the same resolution."""
    parents: dict[str, set[str]] = {}
    current = None
    for line in requirements.splitlines():
        pin = re.match(r"^([A-Za-z0-9_.\-]+)==", line)
        if pin:
            current = canonicalize_name(pin[1])
            parents[current] = set()
            continue
        found = re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9_.\-]+)\s*$", line)
        if current and found and found[1] != "via":
            parents[current].add(canonicalize_name(found[1]))
    return parents


def cuda_only(parents: dict[str, set[str]]) -> set[str]:
    """What the lock holds only for the CUDA build of torch: a package left with no requirer once torch's edges to
    what its CPU build does not require are cut (and whatever only such packages require), plus `UNUSED_ON_TPU`."""
    kept = {name: by - {"torch"} if name not in CPU_TORCH_REQUIRES else set(by) for name, by in parents.items()}
    dropped = set(UNUSED_ON_TPU)
    while True:
        more = {name for name, by in kept.items()
                if name not in dropped and parents[name] and by <= dropped}
        if not more:
            return dropped
        dropped |= more


def render(pylock: dict, header: list[str], dropped: set[str] = frozenset()) -> str:
    tags = supported_tags()
    entries, total, files = [], 0, 0
    for package in sorted(pylock["packages"], key=lambda p: p["name"]):
        name = canonicalize_name(package["name"])
        if name in dropped:
            continue
        picked = chosen(package, tags)
        if name in CPU_BUILDS:
            build = CPU_BUILDS[name]
            entries += [f"{package['name']} @ {build.url} \\", f"    --hash=sha256:{build.sha256}"]
            total += build.size if build.size is not None else max(a.get("size", 0) for a in picked)
        else:
            hashes = artifacts(package, tags)
            entries.append(f"{package['name']}=={package['version']} \\")
            entries += [f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)]
            total += max(a.get("size", 0) for a in picked)
        files += 1
    return "\n".join([*header, "# Generated by `python -m tools lock-tpu-engine`; see its docstring to regenerate.",
                      f"# download: {total} bytes in {files} files (the largest artifact of each entry a CPython 3.12 "
                      "manylinux x86_64 host may pick, as the index lists it)", "", *entries]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog("lock-tpu-engine"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pylock", type=Path, help="uv's pylock.toml for components/locks/vllm-torchtpu.in")
    parser.add_argument("requirements", type=Path, help="uv's requirements.txt of the same resolution (`# via`)")
    args = parser.parse_args(argv)
    for path in (args.pylock, args.requirements):
        if not path.is_file():
            parser.error(f"{path}: no such file (see step 2 of the docstring)")
    header = [line for line in INPUT.read_text().splitlines() if line.startswith("#")]
    dropped = cuda_only(via(args.requirements.read_text()))
    LOCK.write_text(render(tomllib.loads(args.pylock.read_text()), header, dropped))
    print(f"wrote {LOCK.relative_to(ROOT)} without {len(dropped)} CUDA-only packages: {', '.join(sorted(dropped))}")


if __name__ == "__main__":
    main()
