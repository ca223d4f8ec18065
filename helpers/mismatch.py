"""The train/inference mismatch: the sampler (mu_infer) and the trainer (pi_train) disagree.

In an RL step the tokens come from the *sampler* (an inference engine: batched decoding, a KV
cache, often bf16), but the gradient is taken by the *trainer* (a full-sequence forward, often a
different kernel or precision). Even with identical weights the two give slightly different
log-probabilities for the same token. Perplexity's post corrects for this with token-level
importance sampling: each token's term in the loss is weighted by

    r_t = pi_train(y_t | y_<t) / mu_infer(y_t | y_<t) = exp(logp_train - logp_infer).

This module measures that gap from real numbers:

- per token: the ratio r_t and the log-ratio;
- per step: the distribution of r_t (quantiles, share outside a trust band) and the KL between
  sampler and trainer. The tokens were drawn from mu, so KL(mu || pi) = E_mu[log mu - log pi] is
  estimated by k1 = mean(logp_infer - logp_train) (unbiased, can be negative on a sample) and
  k3 = mean(r - 1 - log r) (unbiased and never negative);
- a controlled source of mismatch you can run on a laptop: the same model in bf16 (sampler)
  versus fp32 (trainer) on the same tokens.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from helpers import config, models
from helpers.analyse import COLUMN_INCHES
from helpers.datums import build_datum
from helpers.metrics import output_logprobs
from helpers.rollout import stitch
from helpers.runs import result

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


# ---------------------------------------------------------------- per-token numbers


def log_ratios(trainer_logprobs: Sequence[float], sampler_logprobs: Sequence[float]) -> np.ndarray:
    """log r_t = logp_train - logp_infer, for the sampled tokens (same order, same length)."""
    new = np.asarray(trainer_logprobs, dtype=np.float64).reshape(-1)
    old = np.asarray(sampler_logprobs, dtype=np.float64).reshape(-1)
    if new.shape != old.shape:
        raise ValueError(
            f"trainer and sampler logprobs must be aligned token by token: {new.size} vs {old.size}"
        )
    if not (np.all(np.isfinite(new)) and np.all(np.isfinite(old))):
        raise ValueError("logprobs must be finite (a -inf means a token the model cannot produce)")
    return new - old


def token_ratios(trainer_logprobs: Sequence[float], sampler_logprobs: Sequence[float]) -> np.ndarray:
    """r_t = pi_train / mu_infer per token."""
    return np.exp(log_ratios(trainer_logprobs, sampler_logprobs))


def kl_k1(log_ratio: np.ndarray) -> float:
    """mean(log mu - log pi): unbiased for KL(mu || pi) on tokens drawn from mu."""
    return float(np.mean(-log_ratio)) if log_ratio.size else 0.0


def kl_k3(log_ratio: np.ndarray) -> float:
    """mean(r - 1 - log r): unbiased for KL(mu || pi), every term >= 0 (lower variance than k1)."""
    return float(np.mean(np.expm1(log_ratio) - log_ratio)) if log_ratio.size else 0.0


def truncated_is_weights(ratios: Sequence[float], cap: float = 2.0) -> np.ndarray:
    """min(r_t, cap): truncated importance sampling, bounding what one odd token can do."""
    if cap <= 0:
        raise ValueError("cap must be positive")
    return np.minimum(np.asarray(ratios, dtype=np.float64), cap)


def is_weighted_objective(
    ratios: Sequence[float], advantages: Sequence[float], cap: float | None = None
) -> float:
    """The token-level IS surrogate: mean over tokens of r_t * A_t (what the trainer maximises).

    With r_t = 1 everywhere this is the plain on-policy policy-gradient objective; the ratios
    re-weight each token for having been sampled by mu rather than pi.
    """
    r = np.asarray(ratios, dtype=np.float64)
    if cap is not None:
        r = truncated_is_weights(r, cap)
    a = np.asarray(advantages, dtype=np.float64)
    if r.shape != a.shape:
        raise ValueError("one advantage per token is needed")
    return float(np.mean(r * a)) if r.size else 0.0


# ---------------------------------------------------------------- per-step summary


@dataclass
class MismatchStats:
    """The distribution of token-level ratios of one step, and the sampler/trainer KL."""

    tokens: int
    kl_k1: float
    kl_k3: float
    mean_abs_log_ratio: float
    max_abs_log_ratio: float
    ratio_min: float
    ratio_max: float
    ratio_quantiles: dict[str, float] = field(default_factory=dict)
    share_outside_band: float = 0.0  # share of tokens with |r - 1| > band
    band: float = 0.2
    step: int | None = None
    label: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mismatch_stats(
    trainer_logprobs: Sequence[float],
    sampler_logprobs: Sequence[float],
    *,
    band: float = 0.2,
    step: int | None = None,
    label: str = "",
) -> MismatchStats:
    lr = log_ratios(trainer_logprobs, sampler_logprobs)
    if lr.size == 0:
        return MismatchStats(0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, {}, 0.0, band, step, label)
    r = np.exp(lr)
    return MismatchStats(
        tokens=int(lr.size),
        kl_k1=kl_k1(lr),
        kl_k3=kl_k3(lr),
        mean_abs_log_ratio=float(np.mean(np.abs(lr))),
        max_abs_log_ratio=float(np.max(np.abs(lr))),
        ratio_min=float(r.min()),
        ratio_max=float(r.max()),
        ratio_quantiles={f"p{round(q * 100)}": float(np.quantile(r, q)) for q in QUANTILES},
        share_outside_band=float(np.mean(np.abs(r - 1.0) > band)),
        band=band,
        step=step,
        label=label,
    )


# ---------------------------------------------------------------- from trajectories


def sampled_positions(trajectory: Any) -> list[int]:
    """Indices, in the shifted target array of a multi-turn Datum, of the tokens the sampler drew.

    The Datum is the stitched trajectory shifted once (`helpers.rollout.stitch`): token k of the
    full sequence is target k - 1.
    """
    return [k - 1 for k, sampled in enumerate(stitch(trajectory).sampled) if sampled]


def sampler_logprobs_of(trajectory: Any) -> list[float]:
    """The sampler's logprobs of every generated token, turn after turn."""
    stitched = stitch(trajectory)
    return [logprob for logprob, sampled in zip(stitched.logprobs, stitched.sampled) if sampled]


def trajectory_pairs(
    trajectories: Sequence[Any], trainer_logprobs: Sequence[Sequence[float]]
) -> tuple[np.ndarray, np.ndarray]:
    """(trainer, sampler) logprobs of all sampled tokens, given each Datum's target logprobs."""
    new_all, old_all = [], []
    for trajectory, target_logprobs in zip(trajectories, trainer_logprobs, strict=True):
        target_logprobs = np.asarray(target_logprobs, dtype=np.float64).reshape(-1)
        positions = sampled_positions(trajectory)
        if positions and positions[-1] >= target_logprobs.size:
            raise ValueError(
                f"trainer returned {target_logprobs.size} logprobs but the trajectory needs "
                f"{positions[-1] + 1}: was the Datum built from this trajectory?"
            )
        new_all.append(target_logprobs[positions])
        old_all.append(np.asarray(sampler_logprobs_of(trajectory), dtype=np.float64))
    if not new_all:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(new_all), np.concatenate(old_all)


def measure_step(
    training_client: Any,
    trajectories: Sequence[Any],
    *,
    step: int | None = None,
    band: float = 0.2,
) -> tuple[MismatchStats, np.ndarray, np.ndarray]:
    """Score the trajectories with the trainer (one `forward`, no gradient) and compare.

    Call it before optim_step, with the weights the sampler used. Returns the stats and the
    aligned (trainer, sampler) logprob arrays.
    """
    usable = [t for t in trajectories if t.turns and any(x.completion_tokens for x in t.turns)]
    datums = [build_datum(t).datum for t in usable]
    if not datums:
        return mismatch_stats([], [], band=band, step=step), np.zeros(0), np.zeros(0)
    output = result(training_client.forward(datums, "cross_entropy"))
    trainer = []
    for index in range(len(datums)):
        values = output_logprobs(output, index)
        if values is None:
            raise RuntimeError(
                "the training client's forward() returned no per-datum 'logprobs' in "
                "loss_fn_outputs; the mismatch cannot be measured with this backend"
            )
        trainer.append(values)
    new, old = trajectory_pairs(usable, trainer)
    return mismatch_stats(new, old, band=band, step=step), new, old


# ---------------------------------------------------------------- bf16 sampler vs fp32 trainer


def sequence_logprobs(model: Any, token_ids: Sequence[int]) -> np.ndarray:
    """logp of token k given tokens < k, for k = 1..n-1, in float64 (one full-sequence forward)."""
    import torch

    ids = torch.tensor([list(token_ids)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(1, ids[0, 1:, None])[:, 0].double().numpy()


def precision_mismatch(
    model_name: str | None = None,
    texts: Sequence[str | Sequence[int]] = ("Question: who wrote Hamlet?\nAnswer: William Shakespeare wrote it.",),
    *,
    prompt_tokens: int = 0,
    sampler_dtype: str = "bfloat16",
    band: float = 0.2,
) -> dict[str, Any]:
    """Score the same tokens with the model in `sampler_dtype` (the "sampler") and in fp32.

    A bf16 inference engine and an fp32 trainer is the production pattern; this isolates the
    precision part of the mismatch on one small model (two full-sequence forwards per text).
    Each entry of `texts` is a string or a list of token ids (e.g. a whole trajectory). Tokens
    before `prompt_tokens` are context only, as a prompt would be.
    """
    import torch

    name = model_name or config.default_model()
    tokenizer = models.load_tokenizer(name)
    trainer = models.load_model(name, device="cpu", dtype=torch.float32).eval()
    sampler = models.load_model(name, device="cpu", dtype=getattr(torch, sampler_dtype)).eval()
    new_all, old_all = [], []
    for text in texts:
        ids = tokenizer.encode(text) if isinstance(text, str) else list(text)
        start = max(prompt_tokens - 1, 0)
        new_all.append(sequence_logprobs(trainer, ids)[start:])
        old_all.append(sequence_logprobs(sampler, ids)[start:])
    new, old = np.concatenate(new_all), np.concatenate(old_all)
    return {
        "model": name,
        "stats": mismatch_stats(new, old, band=band, label=f"{sampler_dtype} sampler / fp32 trainer"),
        "trainer_logprobs": new,
        "sampler_logprobs": old,
    }


# ---------------------------------------------------------------- over training


class MismatchHistory:
    """Per-step mismatch stats (and a sample of the raw log-ratios for histograms)."""

    def __init__(self, keep_per_step: int = 4000, seed: int = 0) -> None:
        self.steps: list[MismatchStats] = []
        self.log_ratios: dict[int, np.ndarray] = {}
        self.keep_per_step = keep_per_step
        self._rng = np.random.default_rng(seed)

    def add(self, step: int, trainer_logprobs, sampler_logprobs, band: float = 0.2) -> MismatchStats:
        stats = mismatch_stats(trainer_logprobs, sampler_logprobs, band=band, step=step)
        lr = log_ratios(trainer_logprobs, sampler_logprobs)
        if lr.size > self.keep_per_step:
            lr = self._rng.choice(lr, self.keep_per_step, replace=False)
        self.steps.append(stats)
        self.log_ratios[step] = lr
        return stats

    @classmethod
    def from_metrics(cls, rows: Sequence[dict[str, Any]]) -> "MismatchHistory":
        """Rebuild the per-step stats from a run's metrics.jsonl rows (keys 'mismatch/...')."""
        history = cls()
        for row in rows:
            if "mismatch/kl_k3" not in row:
                continue
            q = {k[len("mismatch/ratio_"):]: v for k, v in row.items()
                 if k.startswith("mismatch/ratio_p")}
            history.steps.append(MismatchStats(
                tokens=int(row.get("mismatch/tokens", 0)), kl_k1=row["mismatch/kl_k1"],
                kl_k3=row["mismatch/kl_k3"], mean_abs_log_ratio=row["mismatch/mean_abs_log_ratio"],
                max_abs_log_ratio=row["mismatch/max_abs_log_ratio"],
                ratio_min=q.get("p1", 1.0), ratio_max=q.get("p99", 1.0), ratio_quantiles=q,
                share_outside_band=row.get("mismatch/share_outside_band", 0.0), step=row.get("step")))
        return history

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for s in self.steps:
            row = {k: v for k, v in s.as_dict().items() if k != "ratio_quantiles"}
            row.update(s.ratio_quantiles)
            out.append(row)
        return out

    def plot(self, ax=None):
        """KL (k1, k3) and the ratio's 1-99 / 5-95 % bands over training steps.

        KL is drawn on a log axis (it spans decades); the ratio as r - 1 on a symmetric log axis,
        because the 5-95 % band is often a hundred times narrower than the 1-99 % one and would
        vanish on a linear axis around 1.
        """
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        if ax is None:
            _, ax = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.4), layout="constrained")
        steps = [s.step for s in self.steps]
        ax[0].plot(steps, [s.kl_k3 for s in self.steps], "o-", ms=4, label="k3 (≥ 0)")
        ax[0].plot(steps, [abs(s.kl_k1) for s in self.steps], "s--", ms=4, alpha=0.7, label="|k1|")
        if any(v > 0 for s in self.steps for v in (s.kl_k3, abs(s.kl_k1))):
            ax[0].set_yscale("log", nonpositive="mask")
        ax[0].set_xlabel("step")
        ax[0].set_ylabel("KL (nats per token)")
        ax[0].set_title("KL(sampler ‖ trainer) per step", fontsize=10)
        ax[0].grid(alpha=0.3, which="both")
        ax[0].legend(fontsize=8)
        q = {k: np.array([s.ratio_quantiles.get(k, 1.0) for s in self.steps]) - 1.0
             for k in ("p1", "p5", "p50", "p95", "p99")}
        spread = np.abs(np.concatenate([q["p5"], q["p95"], q["p1"], q["p99"]]))
        spread = spread[spread > 0]
        low = int(np.floor(np.log10(spread.min()))) if spread.size else -6
        high = max(low + 1, int(np.ceil(np.log10(spread.max())))) if spread.size else -5
        xs = steps
        if len(steps) == 1:  # one measurement: a band one step wide instead of an invisible line
            xs = [steps[0] - 0.3, steps[0] + 0.3]
            q = {k: np.repeat(v, 2) for k, v in q.items()}
        ax[1].fill_between(xs, q["p1"], q["p99"], color="#9ecae1", label="1-99 %")
        ax[1].fill_between(xs, q["p5"], q["p95"], color="#2171b5", label="5-95 %")
        ax[1].plot(xs, q["p50"], "k-", lw=1, label="median")
        ax[1].axhline(0.0, color="grey", lw=0.8)
        ax[1].set_yscale("symlog", linthresh=10.0 ** low)
        decades = [10.0 ** k for k in range(low + 1, high + 1)]
        ax[1].set_yticks([-d for d in reversed(decades)] + [0.0] + decades)
        for axis in ax:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
            if len(steps) == 1:
                axis.set_xticks(steps)
                axis.set_xlim(steps[0] - 1, steps[0] + 1)
        ax[1].set_xlabel("step")
        ax[1].set_ylabel("r − 1 (symmetric log)")
        ax[1].set_title("token ratio π_train / μ_infer", fontsize=10)
        ax[1].legend(fontsize=8, loc="upper left")
        return ax


class MismatchObserver:
    """A training-step observer: the mismatch of every step, measured before its update.

    `before_update` scores the step's trajectories with the trainer (one `forward`, the weights
    the sampler used) and returns the step's `mismatch/...` metrics; `history` keeps them, with a
    sample of the log-ratios, for plots.
    """

    KEYS = ("tokens", "kl_k1", "kl_k3", "mean_abs_log_ratio", "max_abs_log_ratio", "share_outside_band")

    def __init__(self, history: MismatchHistory | None = None, band: float = 0.2) -> None:
        self.history = history if history is not None else MismatchHistory()
        self.band = band

    def before_update(self, context: Any) -> dict[str, float]:
        stats, new, old = measure_step(context.training_client, context.trajectories, step=context.step,
                                       band=self.band)
        if new.size:
            self.history.add(context.step, new, old, band=self.band)
        metrics = {f"mismatch/{key}": getattr(stats, key) for key in self.KEYS}
        metrics.update({f"mismatch/ratio_{key}": value for key, value in stats.ratio_quantiles.items()})
        return metrics


# ---------------------------------------------------------------- the importance-weight explorer


def is_weight_explorer(trainer_logprobs: Sequence[float], sampler_logprobs: Sequence[float],
                       advantages: Sequence[float]):
    """Sliders for the truncation cap C and the trust band: how many tokens each touches, and what
    the IS objective becomes, on real per-token numbers."""
    import ipywidgets as widgets

    r = token_ratios(trainer_logprobs, sampler_logprobs)
    a = np.asarray(advantages, dtype=np.float64)
    cap = widgets.FloatLogSlider(value=2.0, base=10, min=-0.5, max=1, step=0.01, description="cap C")
    band = widgets.FloatLogSlider(value=0.01, base=10, min=-5, max=0, step=0.1, description="band ε")
    text = widgets.HTML()

    def update(_=None):
        truncated = float(np.mean(r > cap.value))
        outside = float(np.mean(np.abs(r - 1) > band.value))
        rows = [
            ("tokens", f"{r.size}"),
            ("objective, no correction (r = 1)", f"{is_weighted_objective(np.ones_like(r), a):+.6f}"),
            ("objective, token-level IS", f"{is_weighted_objective(r, a):+.6f}"),
            (f"objective, truncated at C = {cap.value:.3g}", f"{is_weighted_objective(r, a, cap=cap.value):+.6f}"),
            ("share of tokens truncated (r > C)", f"{truncated:.4f}"),
            (f"share with |r - 1| > {band.value:.2g}", f"{outside:.4f}"),
        ]
        text.value = "<table>" + "".join(
            f"<tr><td style='padding:2px 10px'>{html.escape(k)}</td><td style='font-family:monospace'>"
            f"{html.escape(v)}</td></tr>" for k, v in rows) + "</table>"

    cap.observe(update, names="value")
    band.observe(update, names="value")
    update()
    box = widgets.VBox([cap, band, text])
    box.controls = {"cap": cap, "band": band}
    return box
