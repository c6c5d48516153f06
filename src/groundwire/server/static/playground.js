// groundwire playground: plain JS, no build step. Every value from the server is shown
// with textContent (never innerHTML), so entry text can never inject markup.
"use strict";

const $ = (id) => document.getElementById(id);
const CITATION = /\[(KB|evidence):[^\]\s]+\]/g;
let kbs = [];
let running = 0;

function key() { return sessionStorage.getItem("groundwire.key") || ""; }

async function api(path, body) {
  const headers = { "Accept": "application/json" };
  if (key()) headers["Authorization"] = "Bearer " + key();
  const init = { headers };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({ detail: response.statusText }));
  if (!response.ok) {
    const error = new Error(data.detail || response.statusText);
    error.status = response.status;
    error.field = data.field;
    throw error;
  }
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function showError(error) {
  const box = $("error");
  if (!error) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = (error.status ? error.status + ": " : "") + error.message;
  if (error.status === 401) $("auth").hidden = false;
}

function current() { return kbs.find((kb) => kb.name === $("kb").value); }

function chips(container, values, name) {
  container.replaceChildren();
  if (!values.length) container.append(el("span", "none", "muted"));
  for (const value of values) {
    const label = el("label", null, "chip");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.name = name;
    box.value = value;
    box.addEventListener("change", rerun);
    label.append(box, document.createTextNode(" " + value));
    container.append(label);
  }
}

function checked(name) {
  return [...document.querySelectorAll(`input[name="${name}"]:checked`)].map((box) => box.value);
}

async function loadStatus() {
  try {
    const status = await api("/v1/status");
    kbs = status.knowledge_bases;
    $("auth").hidden = !status.auth || Boolean(key());
    const select = $("kb");
    select.replaceChildren(...kbs.map((kb) => {
      const option = el("option", `${kb.name} (${kb.kind}, ${kb.entries})`);
      option.value = kb.name;
      return option;
    }));
    showError(null);
    await selectKb();
  } catch (error) {
    showError(error);
  }
}

async function selectKb() {
  const kb = current();
  if (!kb) return;
  const documents = kb.kind === "documents";
  chips($("integrations"), documents ? [] : kb.integrations, "integration");
  chips($("domains"), documents ? [] : kb.domains, "blocked");
  $("run").textContent = documents ? "Find evidence" : "Ground";
  await loadIssues(kb.name);
  rerun();
}

async function loadIssues(name) {
  const list = $("issues");
  list.replaceChildren();
  try {
    const report = await api("/v1/validate?kb=" + encodeURIComponent(name));
    if (!report.issues.length) list.append(el("li", `no issues (${report.entries} entries)`, "muted"));
    for (const issue of report.issues) {
      const item = el("li", null, "issue " + issue.severity);
      item.append(el("strong", issue.severity + " " + issue.code), document.createTextNode(": " + issue.message));
      const where = [issue.source_id, issue.entry_id, issue.field].filter(Boolean).join(" / ");
      if (where) item.append(el("span", "  " + where, "muted"));
      list.append(item);
    }
  } catch (error) {
    list.append(el("li", "validation not available: " + error.message, "muted"));
  }
}

function request() {
  const body = { kb: $("kb").value, query: $("query").value, explain: true };
  const kb = current();
  if (kb && kb.kind === "knowledge") {
    body.integrations = checked("integration");
    body.blocked_domains = checked("blocked");
    body.mode = $("mode").value;
  }
  const tokens = parseInt($("max-tokens").value, 10);
  if (tokens > 0) body.max_tokens = tokens;
  if ($("gate-off").checked) body.gate = "off";
  return body;
}

function rerun() { if ($("query").value.trim()) run(); }

async function run(event) {
  if (event) event.preventDefault();
  if (!$("query").value.trim()) { $("query").focus(); return; }
  const ticket = ++running;
  $("results").setAttribute("aria-busy", "true");
  try {
    const data = await api("/v1/ground", request());
    if (ticket !== running) return; // a newer run is on its way
    showError(null);
    render(data);
  } catch (error) {
    if (ticket === running) showError(error);
  } finally {
    if (ticket === running) $("results").removeAttribute("aria-busy");
  }
}

function fact(list, name, value) {
  list.append(el("dt", name), el("dd", value === null || value === undefined || value === "" ? "–" : value));
}

function render(data) {
  $("results").hidden = false;
  $("results").dataset.snapshot = data.snapshot;
  if (data.kind === "documents") renderEvidence(data); else renderOutcome(data);
}

function renderOutcome(data) {
  const meta = data.metadata;
  const explain = data.explain || {};
  const context = explain.context || {};
  const summary = $("summary");
  summary.replaceChildren();
  fact(summary, "snapshot", data.snapshot);
  fact(summary, "confidence", meta.confidence);
  fact(summary, "failure reason", meta.failure_reason || "none: a block was sent");
  fact(summary, "selected", meta.selected_ids.join(", "));
  fact(summary, "expanded", meta.expanded_ids.join(", "));
  fact(summary, "candidates", meta.candidate_count);
  const outside = meta.out_of_scope_count
    ? `${meta.out_of_scope_count} matched in ${meta.out_of_scope_integrations.join(", ")}` : "";
  fact(summary, "out of scope", outside);
  const named = meta.named_integrations || [];
  if (named.length) fact(summary, "named in the query", named.join(", "));
  fact(summary, "duration", meta.duration_ms.toFixed(1) + " ms");
  if (meta.truncated_query) fact(summary, "query", "cut to the length limit");

  const expanded = new Set(meta.expanded_ids);
  const body = $("candidates").tBodies[0];
  body.replaceChildren();
  data.candidates.forEach((item, n) => {
    const row = document.createElement("tr");
    row.className = item.selected ? "selected" : expanded.has(item.id) ? "expanded" : "gated";
    const name = el("td");
    name.append(entryLink(item.id), el("div", item.title, "muted"));
    const hits = el("td");
    if (item.selected) hits.append(el("span", "sent", "badge sel"));
    else if (expanded.has(item.id)) hits.append(el("span", "expanded", "badge sel"));
    else hits.append(el("span", "gated", "badge"));
    if (item.exact) hits.append(el("span", "exact", "badge hit"));
    if (item.alias) hits.append(el("span", "alias", "badge hit"));
    row.append(el("td", n + 1), name, el("td", item.score.toFixed(2), "num"),
      el("td", item.coverage === null ? "–" : Math.round(item.coverage * 100) + "%", "num"),
      hits, breakdown(item.breakdown, item.channels));
    body.append(row);
  });
  if (!data.candidates.length) {
    const row = document.createElement("tr");
    const cell = el("td", "no candidates", "muted");
    cell.colSpan = 6;
    row.append(cell);
    body.append(row);
  }

  const block = data.block;
  const facts = block
    ? `${meta.context_tokens} tokens${context.truncated ? ", truncated" : ""}; ` +
      `full: ${(context.included_ids || []).join(", ") || "–"}; ` +
      `summary only: ${(context.summary_ids || []).join(", ") || "–"}; ` +
      `dropped: ${(context.dropped_ids || []).join(", ") || "–"}`
    : "no block: the model would receive nothing (" + (meta.failure_reason || "error") + ")";
  $("context-facts").textContent = facts;
  renderContext(block ? block.content : "", block ? block.citations : []);
}

function renderEvidence(data) {
  const meta = data.metadata;
  const summary = $("summary");
  summary.replaceChildren();
  fact(summary, "snapshot", data.snapshot);
  fact(summary, "status", data.status);
  fact(summary, "reason", data.reason);
  fact(summary, "candidates", meta.candidate_count);
  fact(summary, "sources", meta.sources);
  fact(summary, "duration", meta.duration_ms.toFixed(1) + " ms");
  const body = $("candidates").tBodies[0];
  body.replaceChildren();
  data.excerpts.forEach((excerpt, n) => {
    const row = document.createElement("tr");
    row.className = "selected";
    const name = el("td");
    name.append(entryLink(excerpt.id), el("div", `${excerpt.path} ${excerpt.span[0]}-${excerpt.span[1]}`, "muted"));
    const hits = el("td");
    hits.append(el("span", "sent", "badge sel"));
    if (excerpt.cut) hits.append(el("span", "cut", "badge"));
    row.append(el("td", n + 1), name, el("td", excerpt.score.toFixed(2), "num"), el("td", "–"),
      hits, el("td", excerpt.heading || ""));
    body.append(row);
  });
  $("context-facts").textContent = data.block
    ? `${meta.tokens} of ${meta.max_tokens} tokens${meta.context_truncated ? ", truncated" : ""}`
    : "no evidence block (" + data.reason + ")";
  renderContext(data.block || "", data.citations);
}

function breakdown(fields, channels) {
  const cell = el("td", null, "breakdown");
  const parts = Object.entries(fields || {}).filter(([, value]) => value > 0);
  const top = Math.max(1e-9, ...parts.map(([, value]) => value));
  for (const [name, value] of parts.sort((a, b) => b[1] - a[1])) {
    const line = el("div", null, "bar");
    const fill = el("span", null, "fill");
    fill.style.width = Math.max(2, (100 * value) / top) + "%";
    line.append(el("span", name, "bar-name"), fill, el("span", value.toFixed(2), "bar-value"));
    cell.append(line);
  }
  for (const [name, part] of Object.entries(channels || {})) {
    cell.append(el("div", `${name}: rank ${part.rank ?? "–"}, score ${part.score.toFixed(3)}, +${part.contribution.toFixed(3)}`, "channel"));
  }
  return cell;
}

function idOf(tag) { return tag.slice(tag.indexOf(":") + 1, -1).split("@")[0]; }

function entryLink(id) {
  const link = el("a", id, "entry-link");
  link.href = "#entry=" + encodeURIComponent(id);
  link.addEventListener("click", (event) => { event.preventDefault(); openEntry(id); });
  return link;
}

function renderContext(text, citations) {
  const pre = $("context");
  pre.replaceChildren();
  let last = 0;
  for (const match of text.matchAll(CITATION)) {
    pre.append(document.createTextNode(text.slice(last, match.index)));
    const mark = el("mark", match[0], "citation");
    mark.tabIndex = 0;
    mark.title = "open " + idOf(match[0]);
    mark.addEventListener("click", () => openEntry(idOf(match[0])));
    mark.addEventListener("keydown", (event) => { if (event.key === "Enter") openEntry(idOf(match[0])); });
    pre.append(mark);
    last = match.index + match[0].length;
  }
  pre.append(document.createTextNode(text.slice(last)));
  const list = $("citations");
  list.replaceChildren();
  for (const tag of citations) {
    const item = el("li");
    const link = entryLink(idOf(tag));
    link.textContent = tag;
    item.append(link);
    list.append(item);
  }
  if (!citations.length) list.append(el("li", "none", "muted"));
}

async function openEntry(id) {
  const panel = $("entry");
  try {
    const data = await api(`/v1/entries/${encodeURIComponent(id)}?kb=${encodeURIComponent($("kb").value)}`);
    const entry = data.entry;
    $("entry-title").textContent = entry.title;
    $("entry-meta").textContent = `${entry.citation} · ${entry.domain || "no domain"} · ${entry.kind} · ${entry.status}`;
    $("entry-summary").textContent = entry.summary;
    $("entry-body").textContent = entry.body || "";
    panel.hidden = false;
    panel.focus();
  } catch (error) {
    showError(error);
  }
}

function closeEntry() { $("entry").hidden = true; $("query").focus(); }

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", run);
  $("kb").addEventListener("change", selectKb);
  for (const id of ["max-tokens", "mode", "gate-off"]) $(id).addEventListener("change", rerun);
  $("entry-close").addEventListener("click", closeEntry);
  $("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("groundwire.key", $("key").value.trim());
    $("key").value = "";
    loadStatus();
  });
  document.addEventListener("keydown", (event) => {
    const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (event.key === "/" && !typing) { event.preventDefault(); $("query").focus(); }
    if (event.key === "Escape" && !$("entry").hidden) closeEntry();
  });
  loadStatus();
  $("query").focus();
});
