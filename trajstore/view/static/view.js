// traj view, Tokens view: colour action tokens by one of the numbers the server embedded
// (#numbers: one array per colouring, indexed by action token), and show every number of a
// token on hover. No framework, no build step.
(function () {
  "use strict";
  const numbers = JSON.parse(document.getElementById("numbers").textContent);
  const ids = JSON.parse(document.getElementById("token-ids").textContent);
  const container = document.getElementById("tokens");
  const tip = document.getElementById("tip");
  const legend = document.getElementById("legend");
  const actionTokens = Array.from(container.querySelectorAll(".t.a"));

  const LABELS = {
    lp: "engine log-prob", pv: "policy version", st: "staleness", blp: "behaviour log-prob (loss)",
    tlp: "trainer log-prob", ratio: "importance ratio", band: "DIS band", adv: "advantage",
    value: "value", ret: "return",
  };
  const BAND = { "-1": "below the band, masked", "0": "inside the band, kept", "1": "above the band, masked" };
  const PALETTE = ["#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7",
                   "#bebada", "#fdb462", "#d9d9d9"];

  function finite(values) { return values.filter((v) => v !== null && Number.isFinite(v)); }

  // One scale per colouring: value -> CSS colour, and a legend.
  function scaleFor(mode) {
    const values = numbers[mode] || [];
    const got = finite(values);
    if (mode === "lp" || mode === "tlp") {
      return { colour: (v) => `hsl(${Math.round(120 * Math.exp(v))}, 75%, 80%)`,
               legend: "red = unlikely (p → 0) … green = likely (p → 1); hue = probability exp(log-prob)" };
    }
    if (mode === "pv") {
      const versions = Array.from(new Set(got)).sort((a, b) => a - b);
      return { colour: (v) => PALETTE[versions.indexOf(v) % PALETTE.length],
               legend: versions.map((v, i) => `<span class="sw" style="background:${PALETTE[i % PALETTE.length]}"></span>v${v}`).join(" ") };
    }
    if (mode === "st") {
      const max = Math.max(1, ...got);
      return { colour: (v) => `hsl(${Math.round(120 - 120 * Math.min(v, max) / max)}, 75%, 80%)`,
               legend: `green = 0 versions … red = ${max} versions behind the trainer` };
    }
    if (mode === "ratio") {
      return { colour: (v) => {
                 const x = Math.max(-1, Math.min(1, Math.log(v) / Math.log(2)));
                 return x < 0 ? `hsl(215, 85%, ${Math.round(95 + 30 * x)}%)` : `hsl(0, 85%, ${Math.round(95 - 30 * x)}%)`;
               },
               legend: "blue = ratio ≤ 0.5 … white = 1 … red = ratio ≥ 2" };
    }
    if (mode === "band") {
      const c = { "-1": "#9ec5fe", "0": "#c7ecc7", "1": "#f7a8a8" };
      return { colour: (v) => c[String(v)],
               legend: ["-1", "0", "1"].map((k) => `<span class="sw" style="background:${c[k]}"></span>${BAND[k]}`).join(" ") };
    }
    const maxAbs = Math.max(1e-12, ...got.map(Math.abs));
    return { colour: (v) => {
               const x = Math.max(-1, Math.min(1, v / maxAbs));
               return x < 0 ? `hsl(0, 75%, ${Math.round(95 + 30 * x)}%)` : `hsl(130, 55%, ${Math.round(95 - 30 * x)}%)`;
             },
             legend: `red = −${maxAbs.toPrecision(3)} … white = 0 … green = +${maxAbs.toPrecision(3)}` };
  }

  function paint(mode) {
    document.querySelectorAll("button.mode").forEach((b) => b.classList.toggle("on", b.dataset.mode === mode));
    container.dataset.mode = mode;
    if (mode === "none" || !numbers[mode]) {
      actionTokens.forEach((el) => { el.style.background = ""; el.classList.remove("na"); });
      legend.innerHTML = "";
      return;
    }
    const values = numbers[mode];
    const scale = scaleFor(mode);
    actionTokens.forEach((el) => {
      const v = values[Number(el.dataset.a)];
      const missing = v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
      el.style.background = missing ? "" : scale.colour(v);
      el.classList.toggle("na", missing);
    });
    legend.innerHTML = `<b>${LABELS[mode]}</b>: ${scale.legend}; dotted = no value`;
  }

  function row(field, label, value) {
    const shown = value === null || value === undefined ? "–" : String(value);
    return `<tr data-field="${field}"><th>${label}</th><td class="v">${shown}</td></tr>`;
  }

  function showTip(el, event) {
    const i = Number(el.dataset.i);
    const rows = [row("position", "position", i), row("token_id", "token id", ids[i]),
                  row("text", "text", JSON.stringify(el.textContent).replace(/</g, "&lt;"))];
    if (el.dataset.a !== undefined) {
      const a = Number(el.dataset.a);
      rows.push(row("action_index", "action token #", a));
      for (const key of Object.keys(LABELS)) {
        if (!numbers[key]) continue;
        let v = numbers[key][a];
        if (key === "band" && v !== null && v !== undefined) v = `${v}: ${BAND[String(v)]}`;
        rows.push(row(key, LABELS[key], v));
        if (key === "lp" && typeof numbers.lp[a] === "number") rows.push(row("p", "p = exp(log-prob)", Math.exp(numbers.lp[a]).toPrecision(4)));
      }
    } else {
      rows.push(`<tr><td colspan="2" class="dim">not an action token</td></tr>`);
    }
    tip.innerHTML = `<table>${rows.join("")}</table>`;
    tip.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = event.clientY + 18 + tip.offsetHeight > window.innerHeight ? event.clientY - tip.offsetHeight - 10 : event.clientY + 18;
    tip.style.left = `${x}px`;
    tip.style.top = `${y}px`;
  }

  container.addEventListener("mouseover", (e) => { const el = e.target.closest(".t"); if (el) showTip(el, e); });
  container.addEventListener("mousemove", (e) => { const el = e.target.closest(".t"); if (el) showTip(el, e); });
  container.addEventListener("mouseleave", () => { tip.hidden = true; });
  document.querySelectorAll("button.mode").forEach((b) => b.addEventListener("click", () => {
    if (b.disabled) return;
    paint(b.dataset.mode);
    history.replaceState(null, "", `#color=${b.dataset.mode}`);
  }));
  const wanted = (location.hash.match(/color=(\w+)/) || [])[1];
  const initial = document.querySelector(`button.mode[data-mode="${wanted}"]:not([disabled])`);
  paint(initial ? wanted : "none");
})();
