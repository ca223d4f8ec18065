// Rollout tree view. Untrusted text is only ever assigned through textContent.
function node(tag, className, text) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined && text !== null) element.textContent = String(text);
  return element;
}

function signed(value) {
  const number = Number(value) || 0;
  return (number > 0 ? "+" : "") + number.toFixed(2);
}

function shorten(text, limit) {
  const flat = String(text || "").replace(/\s+/g, " ").trim();
  return flat.length <= limit ? flat : flat.slice(0, limit - 1) + "…";
}

function colour(advantage) {
  if (!advantage) return "rgba(150,150,150,0.45)";
  const alpha = 0.3 + 0.6 * Math.min(1, Math.abs(advantage));
  return advantage > 0 ? `rgba(46,160,67,${alpha})` : `rgba(218,54,51,${alpha})`;
}

function turnChip(turn, number, validFormat) {
  // An answer turn of a trajectory whose format the reward rejected is not shown as a good answer.
  const kind = turn.kind === "answer" && !validFormat ? "answer srt-answer-bad-format" : turn.kind;
  const chip = node("span", `srt-turn srt-${kind}`);
  chip.dataset.testid = "tree-turn";
  if (turn.kind === "tool") {
    chip.appendChild(node("span", "srt-icon", "search:"));
    chip.appendChild(node("span", "srt-query", shorten(turn.query, 48)));
    const size = turn.observation_tokens === null ? "no obs" : `${turn.observation_tokens} tok`;
    chip.appendChild(node("span", "srt-obs" + (turn.cut ? " srt-cut" : ""), turn.cut ? `${size} ✂ cut` : size));
  } else if (turn.kind === "invalid") {
    chip.appendChild(node("span", "srt-icon", "⚠"));
    // the parser's reason first: why this turn is neither a call nor an answer
    if (turn.error) chip.appendChild(node("span", "srt-invalid-reason", shorten(turn.error, 48) + ":"));
    chip.appendChild(node("span", null, shorten(turn.text, 40) || "(empty)"));
  } else {
    chip.appendChild(node("span", "srt-icon", "✎"));
    chip.appendChild(node("span", null, shorten(turn.text, 40) || "(empty)"));
  }
  chip.title = `turn ${number}: ${turn.kind} (${turn.tokens} tokens)` +
    (turn.kind === "invalid" && turn.error ? ` · ${turn.error}` : "") +
    (turn.kind === "answer" && !validFormat ? " · format invalid: no reward" : "");
  return chip;
}

function details(leaf, hasGold, prefix, advantages) {
  const box = node("div", "srt-details");
  box.dataset.testid = "tree-details";
  if (leaf.question) box.appendChild(node("div", "srt-details-question", `${leaf.question} · ${leaf.gold}`));
  box.appendChild(node("div", "srt-details-title",
    `${prefix}${leaf.index}${leaf.source === "teacher-forced" ? " (teacher-forced: given turns, not sampled)" : ""}: ` +
    `reward ${signed(leaf.reward)}, ` + (advantages ? `advantage ${signed(leaf.advantage)}, ` : "") +
    `format ${leaf.valid_format ? "valid" : "invalid"}` +
    (hasGold ? `, exact match ${leaf.exact_match ? "yes" : "no"}` : "") +
    (leaf.end_reason ? `, ended by ${leaf.end_reason}` : "")));
  leaf.turns.forEach((turn, position) => {
    const block = node("div", "srt-detail-turn");
    block.dataset.testid = "tree-detail-turn";
    block.appendChild(node("div", "srt-detail-head",
      `turn ${position + 1} · assistant · ${turn.kind}${turn.error ? " (" + turn.error + ")" : ""} · ${turn.tokens} tokens`));
    block.appendChild(node("pre", "srt-pre srt-assistant-text", turn.text));
    if (turn.observation !== null) {
      const head = `observation · ${turn.observation_tokens === null ? "?" : turn.observation_tokens} tokens` +
        (turn.cut ? " · cut to the budget" : "");
      block.appendChild(node("div", "srt-detail-head srt-observation-head", head));
      block.appendChild(node("pre", "srt-pre srt-observation-text", turn.observation));
    } else if (turn.kind === "tool" && turn.cut) {
      block.appendChild(node("div", "srt-detail-head srt-cut", "no evidence fitted in the budget: the trajectory ended on this call"));
    }
    box.appendChild(block);
  });
  return box;
}

function render({ model, el }) {
  const root = node("div", "srt-tree");
  root.dataset.testid = "tree-widget";
  el.appendChild(root);

  function draw() {
    const data = model.get("data") || { leaves: [] };
    const selected = model.get("selected");
    root.replaceChildren();

    const head = node("div", "srt-root");
    head.dataset.testid = "tree-root";
    head.appendChild(node("span", "srt-root-label", "question"));
    head.appendChild(node("span", "srt-question", data.question));
    const answers = data.answers || [];
    head.appendChild(node("span", "srt-gold", data.gold || (answers.length ? "gold: " + answers.join(" | ") : "no reference answer")));
    const prefix = data.row_prefix || "τ";
    const advantages = data.advantages !== false;
    root.appendChild(head);

    const branches = node("div", "srt-branches");
    (data.leaves || []).forEach((leaf) => {
      const forced = leaf.source === "teacher-forced";
      const row = node("div", "srt-leaf" + (leaf.index === selected ? " srt-selected" : "") + (forced ? " srt-forced" : ""));
      row.dataset.testid = "tree-leaf";
      row.dataset.index = String(leaf.index);
      row.dataset.source = leaf.source || "sampled";
      row.style.borderLeftColor = colour(leaf.advantage);
      row.appendChild(node("span", "srt-leaf-name", `${prefix}${leaf.index}`));
      if (leaf.question) {
        const own = node("span", "srt-leaf-question", shorten(leaf.question, 48));
        own.title = `${leaf.question} · ${leaf.gold}`;
        row.appendChild(own);
      }
      if (forced) {
        const badge = node("span", "srt-forced-badge", "teacher-forced");
        badge.title = "its turns are given, not sampled; they run through the same state machine and budgets";
        row.appendChild(badge);
      }
      const turns = node("span", "srt-turns");
      leaf.turns.forEach((turn, position) => {
        if (position > 0) turns.appendChild(node("span", "srt-arrow", "→"));
        turns.appendChild(turnChip(turn, position + 1, leaf.valid_format));
      });
      row.appendChild(turns);
      const score = node("span", "srt-score", `r ${signed(leaf.reward)}` + (advantages ? ` · A ${signed(leaf.advantage)}` : ""));
      score.style.background = colour(leaf.advantage);
      row.appendChild(score);
      row.addEventListener("click", () => {
        model.set("selected", leaf.index === model.get("selected") ? -1 : leaf.index);
        model.save_changes();
      });
      branches.appendChild(row);
    });
    if (!(data.leaves || []).length) branches.appendChild(node("div", "srt-empty", "no trajectories yet"));
    root.appendChild(branches);

    const chosen = (data.leaves || []).find((leaf) => leaf.index === selected);
    if (chosen) root.appendChild(details(chosen, answers.length > 0 || (chosen.answers || []).length > 0, prefix, advantages));
  }

  draw();
  model.on("change:data", draw);
  model.on("change:selected", draw);
  return () => {
    model.off("change:data", draw);
    model.off("change:selected", draw);
  };
}

export default { render };
