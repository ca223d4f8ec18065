"""CPU: which way would GRPO push second searches on HotpotQA, from the h200_reach SFT (x4) policy?

    python results/h200_reach/cpu_advantage.py PATH/TO/SFT_SAMPLER_ADAPTER   # about 20 min on 2 cores

One GRPO batch without the update: 12 HotpotQA train questions from GRPO's part (the first 100
HotpotQA questions are SFT's), group 8, temperature 1, the h200 preset's budgets. The adapter
itself is not committed (it is not better than results/h200/adapter).
"""
import sys
import json, time, collections
from helpers.data import load_examples
from helpers.engine import connect
from helpers.experiment import make_plan
from helpers.rollout import RolloutConfig, rollout_batch
from helpers.search import create_search_client
from helpers.train import rollout_metrics
plan = make_plan("h200", "x", overrides=["grpo.data_source=hotpotqa", "grpo.skip=100"])
examples = load_examples("train", data_source="hotpotqa", skip=100)[:12]
svc = connect("local")
sc = svc.create_sampling_client(base_model="qwen2.5-0.5b", model_path=sys.argv[1])
tok = sc.get_tokenizer()
cfg = RolloutConfig.from_config(plan.grpo, group_size=8, seed=7)
t = time.time()
batch = rollout_batch(sc, tok, create_search_client("local"), examples, cfg, progress=True)
m = rollout_metrics(batch)
print(json.dumps({k: m[k] for k in ("reward_mean", "multi_search_share", "multi_search_advantage_mean", "degenerate_group_share")}), f"{time.time()-t:.0f}s")
by = collections.defaultdict(list)
for tr in batch:
    by[min(tr.search_calls, 2)].append((tr.reward, tr.advantage))
for k, v in sorted(by.items()):
    print(k, "searches: n", len(v), "reward", round(sum(r for r, _ in v) / len(v), 3), "advantage", round(sum(a for _, a in v) / len(v), 3))
rows = [{"q": tr.example.question[:80], "gold": tr.example.answers[0], "searches": tr.search_calls, "reward": tr.reward,
         "adv": round(tr.advantage, 3), "yesno": tr.example.answers[0].lower() in ("yes", "no")} for tr in batch]
json.dump(rows, open("results/h200_reach/cpu_advantage_rows.json", "w"), indent=0)
for yn in (True, False):
    sub = [r for r in rows if r["yesno"] == yn]
    multi = [r for r in sub if r["searches"] >= 2]
    print("yes/no" if yn else "other", "n", len(sub), "multi", len(multi), "adv(multi)", round(sum(r["adv"] for r in multi) / max(1, len(multi)), 3))
