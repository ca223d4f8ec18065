"""The policies a learner can run: the base model, the recorded runs' adapters (SFT and SFT + GRPO
of the recorded run, the search agent of the staged recipe, and the multi-search agent that searches
again), or a checkpoint of their own
(notebook 09's).

    from helpers.course.policies import load_policy
    policy = load_policy("sft_grpo")          # or "base", "sft", "agent", "again", or a checkpoint path
    policy.sampler.sample(...)                # a SamplingClient; policy.tokenizer is its tokenizer

A policy is a sampling client on the base model plus, except for `base`, a LoRA adapter. The
adapter is loaded through the engine, which refuses weights trained under a tokenizer that splits
the chat-template markers differently; every refusal reaches the caller as `PolicyNotAvailable`
with a sentence saying what to pick instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytrio import PyTrioError

from helpers import config
from helpers.course.state import engine, recall

# The recorded GPU run the README reports, whose SFT and SFT + GRPO adapters the live widgets use.
RECORDED_RUN = "h200_search"
# The recorded run of the search agent's staged recipe (SFT → GRPO stage `habit` → stage `trim`).
AGENT_RUN = "h200_agent"
# The recorded policy that searches again: SFT → exact-match GRPO (61 updates) → stage `trim` (15 updates).
AGAIN_RUN = "h200_again"


@dataclass(frozen=True)
class RecordedPolicy:
    """Where a recorded policy lives: results/<run>/<adapter>, its evaluation rows
    results/<run>/eval/<evaluation>.jsonl (the label the run's evaluation gave it)."""

    run: str
    adapter: str
    evaluation: str


# The recorded policies by name (None: the base model, no adapter). Each names its own run: the
# two search agents were trained by other runs than SFT and SFT + GRPO.
RECORDED_POLICIES: dict[str, RecordedPolicy | None] = {
    "base": None,
    "sft": RecordedPolicy(RECORDED_RUN, "sft_adapter", "sft"),
    "sft_grpo": RecordedPolicy(RECORDED_RUN, "adapter", "sft_grpo"),
    "agent": RecordedPolicy(AGENT_RUN, "adapter", "sft_grpo"),
    "again": RecordedPolicy(AGAIN_RUN, "adapter", "sft_grpo"),
}
POLICY_LABELS = {"base": "base model", "sft": "SFT", "sft_grpo": "SFT + GRPO",
                 "agent": "search agent (SFT → habit → trim)",
                 "again": "multi-search agent (SFT → exact match → trim)"}
# The trained policy every picker starts from (`default_policy`).
TRAINED_POLICY = "sft_grpo"
# The policy that searches again when its first search did not settle the question: the budget
# playground's "twice" prompts run it. On the recorded test evaluation it searched again on 79 % of
# the HotpotQA questions (often on the entity that links the two hops) and on 10 % of NQ's, and on
# HotpotQA was right more often where it did (EM 0.33 against 0.24 where it stopped); the recorded SFT + GRPO
# policy almost never searches twice.
SEARCHES_AGAIN = "again"


class PolicyNotAvailable(ValueError):
    """A policy that cannot be loaded here: missing adapter, another base model or tokenizer."""


@dataclass
class Policy:
    name: str  # a recorded policy ("base", "sft", "sft_grpo", "agent", "again") or the checkpoint path it was loaded from
    model: str
    sampler: Any
    tokenizer: Any
    path: str | None  # the adapter directory or checkpoint path; None for the base model

    @property
    def label(self) -> str:
        return POLICY_LABELS.get(self.name, f"checkpoint {self.name}")


_LOADED: dict[tuple[str, str], Policy] = {}


def run_dir(run: str | None = None) -> Path:
    return config.RESULTS_DIR / (run or RECORDED_RUN)


def recorded_policy(name: str) -> RecordedPolicy | None:
    """The recorded policy `name` (None for the base model); PolicyNotAvailable for any other name."""
    if name not in RECORDED_POLICIES:
        raise PolicyNotAvailable(f"unknown recorded policy {name!r}: pick one of {', '.join(RECORDED_POLICIES)}")
    return RECORDED_POLICIES[name]


def policy_run(name: str, run: str | None = None) -> str | None:
    """The run that holds recorded policy `name` (`run` in its place when given; None for the base model)."""
    policy = recorded_policy(name)
    return None if policy is None else run or policy.run


def adapter_dir(name: str, run: str | None = None) -> Path | None:
    """Where recorded policy `name` keeps its adapter (None for the base model): in its own run, or
    in `run` when given (a test builds one run folder that holds every policy)."""
    policy = recorded_policy(name)
    return None if policy is None else run_dir(policy_run(name, run)) / policy.adapter


def evaluation_path(name: str, run: str | None = None) -> Path | None:
    """Where recorded policy `name` keeps its evaluation rows on the test split (None for the base
    model, which has no single agent evaluation); `run` in place of its own run when given."""
    policy = recorded_policy(name)
    return None if policy is None else run_dir(policy_run(name, run)) / "eval" / f"{policy.evaluation}.jsonl"


def _meta(directory: Path) -> dict[str, Any] | None:
    path = directory / "meta.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def unavailable_reason(name: str, model: str | None = None, run: str | None = None) -> str | None:
    """Why recorded policy `name` cannot run with `model` here, or None when it can."""
    model = model or config.default_model()
    directory = adapter_dir(name, run)
    if directory is None:
        return None
    meta = _meta(directory)
    relative = directory.relative_to(config.PROJECT_ROOT) if directory.is_relative_to(config.PROJECT_ROOT) else directory
    if meta is None:
        return (f"the recorded run {policy_run(name, run)} has no {POLICY_LABELS[name]} adapter committed "
                f"({relative}/meta.json is missing); pick another policy, or the path of your own checkpoint")
    trained_on = meta.get("base_model")
    if trained_on != model:
        return (f"the {POLICY_LABELS[name]} adapter in {relative} was trained on {trained_on!r}, but this profile's "
                f"model is {model!r}; set COURSE_MODEL={trained_on} (and restart the kernel) to run it, "
                "or pick the base model or your own checkpoint")
    return None


def _learner_paths() -> dict[str, str]:
    """Notebook 09's checkpoints in this profile by recorded-policy name ("sft", "sft_grpo")."""
    trained = recall("training_09") or {}
    found = {"sft_grpo": (trained.get("summary") or {}).get("sampler_path"), "sft": trained.get("sft")}
    # a checkpoint deleted since (or a runs/ folder moved) is no choice at all
    return {name: str(path) for name, path in found.items()
            if path and ("://" in str(path) or _meta(Path(path)) is not None)}


def learner_checkpoints() -> dict[str, str]:
    """The checkpoints notebook 09 saved in this profile, by label (empty when it has not run)."""
    return {f"your {POLICY_LABELS[name]} (notebook 09)": path for name, path in _learner_paths().items()}


def recorded_or_learner(name: str, model: str | None = None) -> str | None:
    """What `load_policy` takes for the recorded policy `name` here: its adapter when it runs with
    this model, else notebook 09's checkpoint in its place ("sft", "sft_grpo"), else None."""
    if unavailable_reason(name, model) is None:
        return name
    return _learner_paths().get(name)


def default_policy(model: str | None = None) -> str:
    """The trained policy: the recorded SFT + GRPO adapter when it runs here, else notebook 09's
    SFT + GRPO checkpoint, else the base model."""
    return recorded_or_learner(TRAINED_POLICY, model) or "base"


def policy_options(model: str | None = None) -> list[tuple[str, str]]:
    """(label, value) pairs for a policy picker: the recorded policies (each marked when it cannot
    run here), then notebook 09's checkpoints. Values are what `load_policy` takes."""
    options = []
    # the two trained policies the course contrasts first, the base model last
    names = dict.fromkeys((TRAINED_POLICY, SEARCHES_AGAIN, *(n for n in RECORDED_POLICIES if n != "base"), "base"))
    for name in names:
        reason = unavailable_reason(name, model)
        suffix = "" if name == "base" else f" (recorded run {policy_run(name)})"
        if reason is not None:
            suffix += " — not available here"
        options.append((POLICY_LABELS[name] + suffix, name))
    options += list(learner_checkpoints().items())
    return options


def load_policy(policy: str | None = None, *, model: str | None = None, service: Any = None) -> Policy:
    """A sampling client for `policy` (a recorded policy's name or a checkpoint path), loaded once
    per kernel and model. Raises PolicyNotAvailable with what to do instead when it cannot run."""
    model = model or config.default_model()
    name = str(policy or default_policy(model))
    key = (model, name)
    if key in _LOADED:
        return _LOADED[key]
    if name in RECORDED_POLICIES:
        reason = unavailable_reason(name, model)
        if reason is not None:
            raise PolicyNotAvailable(reason)
        directory = adapter_dir(name)
        path = None if directory is None else str(directory)
    else:
        path = name
        if "://" not in path:
            if not Path(path).is_dir():
                raise PolicyNotAvailable(
                    f"unknown policy {name!r}: pick one of {', '.join(RECORDED_POLICIES)}, or give the directory "
                    "of a checkpoint (adapter.safetensors + meta.json, as notebook 09 saves it)")
            meta = _meta(Path(path))
            if meta is None:
                raise PolicyNotAvailable(f"{path} holds no checkpoint (meta.json is missing)")
            if meta.get("base_model") != model:
                raise PolicyNotAvailable(f"{path} was trained on {meta.get('base_model')!r}, but this profile's model "
                                         f"is {model!r}; set COURSE_MODEL to match or pick another policy")
    if service is None:
        service = engine(model).service
    try:
        sampler = service.create_sampling_client(base_model=model, model_path=path)
    except (PyTrioError, FileNotFoundError) as error:  # the engine's tokenizer and layout checks
        raise PolicyNotAvailable(f"cannot load {POLICY_LABELS.get(name, name)}: {error}") from error
    loaded = Policy(name, model, sampler, sampler.get_tokenizer(), path)
    _LOADED[key] = loaded
    return loaded
