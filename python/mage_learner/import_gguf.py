"""A llama-family GGUF file (llama.cpp's format, quantized or not) as a Hugging Face directory the
worker loads: `python -m mage_learner.import_gguf --gguf FILE --out DIR [--f32-gguf FILE]`.

transformers (with the `gguf` package) reads the file: it dequantizes the tensors, undoes
llama.cpp's Q/K row order and converts the tokenizer and chat template. Its model stays flagged as
quantized, so `save_pretrained` refuses it; the weights are therefore moved into a plain model
built from the same config, which saves as ordinary safetensors. `--f32-gguf` also writes the
dequantized weights back as an F32 GGUF with the source's metadata, so llama.cpp can run exactly
the weights the directory holds (the import check and the speed benchmark compare against it)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .folders import replace_dir

# GGUF architectures the worker can train once imported: decoder-only models that transformers
# both reads from GGUF and loads as a causal LM with a chat template.
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
IMPORT_RECORD = "mage-import.json"


class GgufImportError(Exception):
    """A problem with the user's file or output path (printed without a traceback)."""


@dataclass(frozen=True)
class GgufInfo:
    architecture: str
    name: str
    file_type: int
    tensors: int


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def field_value(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def read_info(path: Path) -> GgufInfo:
    import gguf

    if not path.is_file():
        raise GgufImportError(f"--gguf {path}: no such file")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - any parse failure means the file is not a GGUF
        raise GgufImportError(f"--gguf {path} is not a readable GGUF file ({e})") from None
    arch = str(field_value(reader, "general.architecture", "?"))
    if arch not in SUPPORTED:
        raise GgufImportError(
            f"--gguf {path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})"
        )
    return GgufInfo(
        architecture=arch,
        name=str(field_value(reader, "general.name", path.stem)),
        file_type=int(field_value(reader, "general.file_type", -1)),
        tensors=len(reader.tensors),
    )


def check_out_dir(out: Path) -> None:
    """--out must be new, empty, or an earlier import (replaced atomically)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / IMPORT_RECORD).is_file())):
        raise GgufImportError(f"--out {out} exists and is not an earlier import; choose a new directory")


def plain_copy(quantized: Any) -> Any:
    """The dequantized model's weights in an ordinary (unflagged) model of the same config."""
    import torch
    from transformers import AutoModelForCausalLM

    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in quantized.state_dict().items()}
    missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
    if unexpected or [k for k in missing if "rotary" not in k]:
        raise GgufImportError(f"the GGUF's tensors do not fit the model: missing {missing}, unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    plain.generation_config = quantized.generation_config
    return plain.eval()


def write_directory(model: Any, tokenizer: Any, out: Path, record: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / IMPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        readable_by_all(tmp)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def readable_by_all(folder: Path) -> None:
    """mkdtemp's folder is private (0700) and some writers leave 0600 files; a model directory is shared."""
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o755 if f.is_dir() else 0o644)


def import_gguf(gguf_path: Path, out: Path, log: Any = sys.stderr) -> dict[str, Any]:
    """Writes `gguf_path` as a float32 Hugging Face directory at `out`; returns the import record."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = read_info(gguf_path)
    check_out_dir(out)
    t0 = time.perf_counter()
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        print(f"import-gguf: warning: {name} has no chat template; the worker's `render` needs one", file=log)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model = plain_copy(quantized)
    del quantized
    params = sum(p.numel() for p in model.parameters())
    record = {
        "source": name,
        "sourceSha256": sha256_file(gguf_path),
        "ggufName": info.name,
        "ggufArchitecture": info.architecture,
        "ggufFileType": info.file_type,
        "architecture": type(model).__name__,
        "parameters": params,
        "vocabSize": int(model.config.vocab_size),
        "dtype": "float32",
    }
    write_directory(model, tokenizer, out, record)
    print(
        f"import-gguf: wrote {out}: {record['architecture']} ({info.name}), {params / 1e6:.1f}M parameters, "
        f"vocabulary {record['vocabSize']}, float32, in {time.perf_counter() - t0:.1f} s",
        file=log,
    )
    return record


def write_f32_gguf(src: Path, dst: Path) -> None:
    """`src` with every tensor dequantized to F32 (same names, order and metadata, file type 0)."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = str(field_value(reader, "general.architecture"))
    writer = gguf.GGUFWriter(str(dst), arch=arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        copy_field(writer, key, field)
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    for t in reader.tensors:
        values = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, values.reshape([int(d) for d in reversed(t.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def copy_field(writer: Any, key: str, field: Any) -> None:
    import gguf

    kind = field.types[0]
    value = field.contents()
    if kind == gguf.GGUFValueType.ARRAY:
        writer.add_key_value(key, value, kind, sub_type=field.types[-1])
    else:
        writer.add_key_value(key, value, kind)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.import_gguf", description=__doc__)
    ap.add_argument("--gguf", required=True, help="the GGUF file (llama, mistral, qwen2 or qwen3)")
    ap.add_argument("--out", required=True, help="the Hugging Face directory to write")
    ap.add_argument("--f32-gguf", help="also write the dequantized weights as an F32 GGUF here")
    ap.add_argument("--json", action="store_true", help="print the import record as JSON on stdout")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        record = import_gguf(Path(args.gguf), Path(args.out))
        if args.f32_gguf:
            write_f32_gguf(Path(args.gguf), Path(args.f32_gguf))
            print(f"import-gguf: wrote {args.f32_gguf} (F32)", file=sys.stderr)
    except GgufImportError as e:
        print(f"import-gguf: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
