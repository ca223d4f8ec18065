// Token strip view. Token text is untrusted and only ever set through textContent.
function node(tag, className, text) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined && text !== null) element.textContent = String(text);
  return element;
}

function colour(row) {
  if (row.role === "prompt") return "rgba(150,150,150,0.25)";
  if (row.role === "observation") return "rgba(42,127,143,0.22)";
  const advantage = Number(row.advantage) || 0;
  if (!advantage) return "rgba(150,150,150,0.45)";
  const alpha = 0.3 + 0.6 * Math.min(1, Math.abs(advantage));
  return advantage > 0 ? `rgba(46,160,67,${alpha})` : `rgba(218,54,51,${alpha})`;
}

function visible(text) {
  // Show whitespace-only tokens so every position is clickable.
  if (text === "") return "∅";
  return text.replace(/\n/g, "↵\n");
}

function fixed(value, digits) {
  // A tiny negative number rounds to "-0.000": show it as zero.
  const text = Number(value).toFixed(digits);
  return Number(text) === 0 ? (0).toFixed(digits) : text;
}

function describe(row) {
  const logprob = row.logprob === null ? "—" : fixed(row.logprob, 3);
  const advantage = (row.advantage > 0 ? "+" : "") + fixed(row.advantage, 2);
  return `#${row.position} · id ${row.id} · text ${JSON.stringify(row.text)} · ${row.role} · ` +
    `old logprob ${logprob} · advantage ${advantage} · mask ${row.mask}`;
}

function render({ model, el }) {
  const root = node("div", "srt-strip");
  root.dataset.testid = "token-strip";
  el.appendChild(root);
  let rows = [];
  let spans = [];
  let info = null;

  function showActive() {
    // The info line falls back to the selected token whenever the pointer leaves a token.
    const chosen = rows[model.get("active")];
    info.textContent = chosen ? describe(chosen) : "hover or click a token";
  }

  function select() {
    // A click changes only the highlight and the info line: the strip keeps its scroll position.
    const active = model.get("active");
    spans.forEach((span, position) => span.classList.toggle("srt-tok-active", position === active));
    showActive();
  }

  function draw() {
    rows = model.get("rows") || [];
    root.replaceChildren();
    const legend = node("div", "srt-legend");
    [["prompt", "rgba(150,150,150,0.25)"], ["observation (mask 0)", "rgba(42,127,143,0.22)"],
     ["assistant A>0", "rgba(46,160,67,0.7)"], ["assistant A<0", "rgba(218,54,51,0.7)"],
     ["assistant A=0", "rgba(150,150,150,0.45)"]].forEach(([label, background]) => {
      const item = node("span", null, label);
      item.style.background = background;
      legend.appendChild(item);
    });
    root.appendChild(legend);
    info = node("div", "srt-strip-info");
    info.dataset.testid = "token-info";
    const strip = node("div", "srt-strip-tokens");
    strip.dataset.testid = "token-scroll";
    spans = rows.map((row) => {
      const span = node("span", `srt-tok srt-tok-${row.role}`, visible(row.text));
      span.dataset.testid = "token";
      span.style.background = colour(row);
      span.title = describe(row);
      span.addEventListener("mouseenter", () => { info.textContent = describe(row); });
      span.addEventListener("mouseleave", showActive);
      span.addEventListener("click", () => {
        model.set("active", row.position);
        model.save_changes();
        select();
      });
      strip.appendChild(span);
      return span;
    });
    root.appendChild(info);
    root.appendChild(strip);
    select();
  }

  draw();
  model.on("change:rows", draw);
  model.on("change:active", select);
  return () => { model.off("change:rows", draw); model.off("change:active", select); };
}

export default { render };
