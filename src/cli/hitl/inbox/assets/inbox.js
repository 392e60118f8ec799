// The approval inbox page: a live list from /events, decisions POSTed to /api/decisions with
// the per-run token; "Edit & approve" has /api/edits review the edit (the patch and each value
// it changes) before it approves with that patch. Every text from the cluster is set with
// textContent, never as markup.
"use strict";

const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const LABELS = {
  pending: "Pending",
  approved: "Approved, waiting for the call",
  executed: "Executed",
  denied: "Denied",
  expired: "Expired",
  cancelled: "Cancelled",
};

let rows = [];
let user = "";
let selected = null; // "namespace/name" of the chosen pending request
let busy = new Set();
let editing = null; // { row, patch }: the request in the edit dialog, and its reviewed patch

const $ = (id) => document.getElementById(id);
const keyOf = (r) => `${r.namespace}/${r.name}`;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

function stateAt(r, now) {
  return r.state === "pending" && Date.parse(r.expiresAt) <= now ? "expired" : r.state;
}

function span(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 172800) return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d`;
}

function pendingRows(now = Date.now()) {
  return rows.filter((r) => stateAt(r, now) === "pending");
}

function badge(state) {
  return el("span", { class: `badge ${state}`, text: LABELS[state] });
}

function requestCard(r, now) {
  const state = stateAt(r, now);
  const key = keyOf(r);
  const card = el("article", {
    class: `request ${state}${key === selected ? " selected" : ""}`,
    "data-key": key,
    "aria-label": `${r.tool} for agent ${r.agent} (${LABELS[state]})`,
    tabindex: state === "pending" ? (key === selected ? "0" : "-1") : null,
  });
  if (state === "pending") card.setAttribute("aria-selected", String(key === selected));
  else card.removeAttribute("tabindex");
  card.addEventListener("click", () => state === "pending" && choose(key, true));
  const title = el("h3", {}, el("span", { class: "tool", text: r.tool }), " ", badge(state));
  for (const word of r.risk || []) title.append(el("span", { class: `badge risk${word.startsWith("destructive") ? " destructive" : ""}`, text: word }));
  if (state === "pending" && r.tier != null) title.append(el("span", { class: "badge tier", text: `tier ${r.tier}` }));
  const meta = el(
    "p",
    { class: "meta" },
    `agent ${r.agent}${r.caller ? ` · called by ${r.caller}` : ""} · ${r.server} · ${r.namespace}/${r.name}`,
  );
  const times = el("p", { class: "times" });
  if (r.created) times.append(`asked ${span(now - Date.parse(r.created))} ago`);
  if (state === "pending") {
    times.append(" · expires in ", el("span", { class: "countdown", "data-expires": r.expiresAt, text: span(Date.parse(r.expiresAt) - now) }));
    if (r.approvals !== "0/1") times.append(` · approvals ${r.approvals}`);
    if (r.nextTierAt) times.append(` · tier ${r.tier + 1} in `, el("span", { class: "countdown", "data-expires": r.nextTierAt, text: span(Date.parse(r.nextTierAt) - now) }));
  }
  if (r.decidedBy) times.append(` · ${r.decidedBy}`);
  if (r.reason) times.append(`: ${r.reason}`);
  card.append(title, meta, times);
  if (r.redaction) card.append(el("p", { class: "redaction", text: `Note: ${r.redaction}` }));
  if (r.edit) card.append(el("p", { class: "edit", text: r.edit }));
  card.append(el("pre", { class: "arguments", "aria-label": "arguments", text: r.arguments }));
  if (state === "pending") {
    const off = busy.has(key);
    card.append(
      el(
        "div",
        { class: "actions" },
        el("button", { class: "approve", type: "button", onclick: (e) => { e.stopPropagation(); decide("Approve", [r]); }, ...(off ? { disabled: "" } : {}), text: "Approve" }),
        el("button", { class: "deny", type: "button", onclick: (e) => { e.stopPropagation(); decide("Deny", [r]); }, ...(off ? { disabled: "" } : {}), text: "Deny" }),
        r.editable == null ? null : el("button", { class: "edit", type: "button", onclick: (e) => { e.stopPropagation(); openEdit(r); }, ...(off ? { disabled: "" } : {}), text: "Edit & approve" }),
      ),
    );
  }
  return card;
}

// Pending requests grouped by agent, groups in the order of their most urgent request: the
// order they are shown and moved through.
function pendingGroups(now = Date.now()) {
  const groups = new Map();
  for (const r of pendingRows(now)) {
    const g = `${r.namespace}/${r.agent}`;
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(r);
  }
  return groups;
}

function shownPending(now = Date.now()) {
  return [...pendingGroups(now).values()].flat();
}

function render() {
  const now = Date.now();
  const groups = pendingGroups(now);
  const pending = [...groups.values()].flat();
  if (!pending.some((r) => keyOf(r) === selected)) selected = pending.length ? keyOf(pending[0]) : null;
  const hadFocus = document.activeElement && document.activeElement.classList.contains("request");
  $("pending-count").textContent = `(${pending.length})`;
  const list = $("pending");
  list.replaceChildren();
  if (!pending.length) list.append(el("p", { class: "empty", text: "Nothing is waiting for a decision." }));
  for (const [g, items] of groups) {
    const [namespace, agent] = [items[0].namespace, items[0].agent];
    const head = el(
      "div",
      { class: "group-head" },
      el("h3", { text: `Agent ${agent} in ${namespace}` }),
      el("button", { type: "button", class: "approve", "data-batch": g, onclick: () => batch("Approve", items), text: `Approve all ${items.length}` }),
      el("button", { type: "button", class: "deny", onclick: () => batch("Deny", items), text: `Deny all ${items.length}` }),
    );
    list.append(el("section", { class: "group", "aria-label": `Agent ${agent} in ${namespace}` }, head, ...items.map((r) => requestCard(r, now))));
  }
  const recent = rows.filter((r) => stateAt(r, now) !== "pending");
  $("recent").replaceChildren(...(recent.length ? recent.map((r) => requestCard(r, now)) : [el("p", { class: "empty", text: "None yet." })]));
  if (hadFocus && selected) focusSelected();
}

function focusSelected() {
  const card = document.querySelector(`article.request[data-key="${CSS.escape(selected)}"]`);
  if (card) {
    card.focus();
    card.scrollIntoView({ block: "nearest" });
  }
}

function choose(key, focus) {
  selected = key;
  for (const card of document.querySelectorAll("#pending article.request")) {
    const on = card.dataset.key === key;
    card.classList.toggle("selected", on);
    card.setAttribute("aria-selected", String(on));
    card.tabIndex = on ? 0 : -1;
  }
  if (focus) focusSelected();
}

function move(step) {
  const pending = shownPending();
  if (!pending.length) return;
  const i = pending.findIndex((r) => keyOf(r) === selected);
  const next = pending[Math.min(pending.length - 1, Math.max(0, i + step))];
  choose(keyOf(next), true);
}

function notify(lines, failed) {
  const box = $("notice");
  box.className = failed ? "failed" : "done";
  box.replaceChildren(...lines.map((l) => el("p", { text: l })));
  box.hidden = false;
}

async function post(path, body) {
  return fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-hitl-token": token },
    body: JSON.stringify(body),
  });
}

// patch: the reviewed JSON Patch to approve with (one request); reason: the edit dialog's.
async function decide(decision, items, patch, reason = $("reason").value.trim()) {
  if (decision === "Deny" && !reason) reason = `Denied by ${user} in the approval inbox`;
  const keys = items.map(keyOf);
  keys.forEach((k) => busy.add(k));
  render();
  try {
    const resp = await post("/api/decisions", {
      decision,
      reason: reason || undefined,
      requests: items.map((r) => ({ namespace: r.namespace, name: r.name })),
      patch,
    });
    if (!resp.ok) {
      notify([`The inbox refused: ${await resp.text()}`], true);
      return;
    }
    const { results } = await resp.json();
    notify(results.map((r) => r.message), results.some((r) => !r.ok));
    if (results.every((r) => r.ok)) $("reason").value = "";
  } catch (e) {
    notify([`Could not reach the inbox: ${e}`], true);
  } finally {
    keys.forEach((k) => busy.delete(k));
    render();
  }
}

function batch(decision, items) {
  const dialog = $("confirm");
  const verb = decision === "Approve" ? "Approve" : "Deny";
  const what = decision === "Approve" ? "Each call runs once." : "None of them runs.";
  $("confirm-text").textContent = `${verb} ${items.length} pending request(s) of agent ${items[0].agent} in ${items[0].namespace}? ${what}`;
  dialog.returnValue = "";
  dialog.onclose = () => {
    if (dialog.returnValue === "ok") decide(decision, items);
  };
  dialog.showModal();
  $("confirm-ok").focus();
}

function openEdit(r) {
  editing = { row: r, patch: null };
  $("edit-what").textContent = `${r.tool} for agent ${r.agent} · ${r.namespace}/${r.name}. ` +
    "The call runs once with your edits, if the gate accepts them (the tool's input schema, the rules); " +
    "the agent is told which values you changed.";
  $("edit-arguments").value = r.editable;
  $("edit-reason").value = $("reason").value;
  unreviewed();
  $("edit").showModal();
  $("edit-arguments").focus();
}

// The arguments changed since the review (or were never reviewed): nothing may be approved yet.
function unreviewed() {
  if (editing) editing.patch = null;
  $("edit-review").hidden = true;
  $("edit-problem").hidden = true;
  $("edit-approve").disabled = true;
}

async function reviewEdit() {
  const r = editing.row;
  const problem = $("edit-problem");
  unreviewed();
  let resp;
  try {
    resp = await post("/api/edits", { namespace: r.namespace, name: r.name, arguments: $("edit-arguments").value });
  } catch (e) {
    resp = { ok: false, text: async () => `Could not reach the inbox: ${e}` };
  }
  const review = resp.ok ? await resp.json() : { refusal: `The inbox refused: ${await resp.text()}` };
  if (review.refusal) {
    problem.textContent = review.refusal;
    problem.hidden = false;
    return;
  }
  editing.patch = review.patch;
  $("edit-changes").tBodies[0].replaceChildren(
    ...review.changes.map((c) => el("tr", {}, el("td", { text: c.path }), el("td", { text: c.before ?? "(absent)" }), el("td", { text: c.after ?? "(removed)" }))),
  );
  $("edit-review").hidden = false;
  $("edit-approve").disabled = false;
  $("edit-approve").focus();
}

function approveEdit() {
  const { row, patch } = editing;
  if (!patch) return;
  const reason = $("edit-reason").value.trim();
  $("edit").close("approved");
  decide("Approve", [row], patch, reason);
}

$("edit-arguments").addEventListener("input", unreviewed);
$("edit-check").addEventListener("click", reviewEdit);
$("edit-approve").addEventListener("click", approveEdit);
$("edit").addEventListener("close", () => {
  editing = null;
});

document.addEventListener("keydown", (e) => {
  if ($("confirm").open || $("edit").open || e.altKey || e.ctrlKey || e.metaKey) return;
  const inReason = e.target === $("reason");
  if (!inReason && e.target.tagName === "BUTTON" && e.key === "Enter") return;
  const current = pendingRows().find((r) => keyOf(r) === selected);
  switch (e.key) {
    case "ArrowDown":
      if (inReason) return;
      e.preventDefault();
      move(1);
      break;
    case "ArrowUp":
      if (inReason) return;
      e.preventDefault();
      move(-1);
      break;
    case "Enter":
      if (current && !busy.has(selected)) {
        e.preventDefault();
        decide("Approve", [current]);
      }
      break;
    case "Escape":
      if (current && !busy.has(selected)) {
        e.preventDefault();
        decide("Deny", [current]);
      }
      break;
  }
});

setInterval(() => {
  const now = Date.now();
  let expired = false;
  for (const c of document.querySelectorAll(".countdown")) {
    const left = Date.parse(c.dataset.expires) - now;
    c.textContent = span(left);
    expired ||= left <= 0;
  }
  if (expired) render();
}, 1000);

function connect() {
  if (!token) {
    $("who").textContent = "No token: open the address that `kubectl hitl ui` printed.";
    return;
  }
  const events = new EventSource(`/events?token=${encodeURIComponent(token)}`);
  events.addEventListener("snapshot", (e) => {
    const snapshot = JSON.parse(e.data);
    user = snapshot.user;
    rows = snapshot.rows;
    $("who").textContent = `Acting as ${snapshot.user} · ${snapshot.scope}${snapshot.error ? ` · ${snapshot.error}` : ""}`;
    document.body.dataset.ready = "true";
    render();
  });
  events.onerror = () => {
    $("who").textContent = `Disconnected from the inbox; retrying… (acting as ${user || "?"})`;
  };
}

connect();
