// Drives `kubectl hitl ui` in Debian's headless Chromium, as an approver would (tests/inbox.rs
// starts the inbox against a fake apiserver with the requests it expects here).
// Usage: node inbox.mjs <inbox url with #token=…> <fake apiserver url> <namespace> [screenshot.png]
// Prints one line per step passed; exits non-zero with the reason on the first failure.
import http from "node:http";
import { chromium } from "playwright-core";

const [inboxUrl, apiUrl, namespace, screenshot] = process.argv.slice(2);
const origin = new URL(inboxUrl).origin;
const token = new URLSearchParams(new URL(inboxUrl).hash.slice(1)).get("token");
const TIMEOUT = 10_000;

const card = (name) => `article.request[data-key="${namespace}/${name}"]`;
const pendingCard = (name) => `#pending ${card(name)}`;
const recentCard = (name, state) => `#recent ${card(name)}.${state}`;
const ok = (what) => console.log(`ok - ${what}`);

// A raw HTTP request, with whatever Host and Origin a hostile page or rebinding DNS would send.
function raw(method, path, headers, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(path, origin);
    const req = http.request({ host: u.hostname, port: u.port, method, path: u.pathname + u.search, headers }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

function expect(cond, what) {
  if (!cond) throw new Error(`FAILED: ${what}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(TIMEOUT);
  const problems = [];
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("console", (m) => m.type() === "error" && problems.push(m.text()));

  // 1. The list as the apiserver has it, then a request appearing.
  await page.goto(inboxUrl);
  await page.waitForSelector("body[data-ready=true]");
  expect((await page.locator("#who").textContent()).includes("Acting as alice"), "the page names the user");
  await page.waitForSelector(recentCard("done-1", "executed"));
  expect((await page.locator("#pending article.request").count()) === 6, "6 pending requests at first");
  const created = await fetch(`${apiUrl}/apis/kagent.dev/v1alpha2/namespaces/${namespace}/approvalrequests`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      apiVersion: "kagent.dev/v1alpha2",
      kind: "ApprovalRequest",
      metadata: { name: "new-call", namespace },
      spec: {
        agentRef: { name: "helper" },
        toolServer: { kind: "RemoteMCPServer", name: "fs", namespace },
        toolName: "delete_file",
        argumentsPreview: { path: "/data/new.csv" },
        argumentsSha256: "c".repeat(64),
        argumentsBytes: 24,
        requestedBy: `system:serviceaccount:${namespace}:helper`,
        expiresAt: new Date(Date.now() + 7_200_000).toISOString().replace(/\.\d+Z$/, "Z"),
      },
    }),
  });
  expect(created.status === 201, `the fake apiserver created new-call (${created.status})`);
  await page.waitForSelector(pendingCard("new-call"));
  expect((await page.locator(`${pendingCard("new-call")} pre.arguments`).textContent()).includes('"path": "/data/new.csv"'), "pretty arguments");
  ok("the list shows the pending and finished requests, and a new request appears by itself");

  // 2. Hostile requests change nothing: another site's page, a rebinding Host, no token.
  const evil = http.createServer((_, res) => res.end("<!doctype html><title>evil</title>"));
  await new Promise((r) => evil.listen(0, "127.0.0.1", r));
  const evilPage = await browser.newPage();
  await evilPage.goto(`http://127.0.0.1:${evil.address().port}/`);
  const fromEvil = await evilPage.evaluate(async ({ origin, token, namespace }) => {
    const body = JSON.stringify({ decision: "Approve", requests: [{ namespace, name: "helper-delete-1" }] });
    const results = [];
    for (const init of [
      { method: "POST", headers: { "content-type": "application/json", "x-hitl-token": token }, body },
      { method: "POST", mode: "no-cors", headers: { "content-type": "text/plain" }, body },
    ]) {
      try {
        const r = await fetch(`${origin}/api/decisions`, init);
        results.push(`status ${r.status} ${r.type}`);
      } catch (e) {
        results.push(`blocked: ${e}`);
      }
    }
    return results;
  }, { origin, token, namespace });
  await evilPage.close();
  evil.close();
  expect(fromEvil[0].startsWith("blocked"), `a cross-origin JSON POST is blocked by its preflight: ${fromEvil[0]}`);
  const decision = JSON.stringify({ decision: "Approve", requests: [{ namespace, name: "helper-delete-1" }] });
  const json = { "content-type": "application/json", "x-hitl-token": token };
  const host = new URL(origin).host;
  const refused = [
    ["another origin", await raw("POST", "/api/decisions", { ...json, host, origin: "http://evil.example" }, decision)],
    ["no Origin", await raw("POST", "/api/decisions", { ...json, host }, decision)],
    ["a rebinding Host", await raw("POST", "/api/decisions", { ...json, host: `evil.example:${new URL(origin).port}`, origin: "http://evil.example" }, decision)],
    ["no token", await raw("POST", "/api/decisions", { "content-type": "application/json", host, origin }, decision)],
    ["a form post", await raw("POST", "/api/decisions", { "content-type": "application/x-www-form-urlencoded", "x-hitl-token": token, host, origin }, "decision=Approve")],
    ["the list without the token", await raw("GET", "/events", { host })],
    ["an edit review without the token", await raw("POST", "/api/edits", { "content-type": "application/json", host, origin }, JSON.stringify({ namespace, name: "cleaner-tidy-1", arguments: "{}" }))],
    ["an edit from another origin", await raw("POST", "/api/decisions", { ...json, host, origin: "http://evil.example" }, JSON.stringify({ decision: "Approve", requests: [{ namespace, name: "cleaner-tidy-1" }], patch: "[]" }))],
    ["the page through a rebinding Host", await raw("GET", "/", { host: "evil.example" })],
  ];
  for (const [what, r] of refused) {
    expect(r.status === 403 || r.status === 415, `${what} is refused (got ${r.status}: ${r.text})`);
    expect(!r.headers["access-control-allow-origin"], `${what}: no CORS header`);
  }
  const preflight = await raw("OPTIONS", "/api/decisions", { host, origin: "http://evil.example", "access-control-request-method": "POST" });
  expect(!preflight.headers["access-control-allow-origin"], "a preflight gets no CORS header");
  await page.waitForTimeout(300);
  expect(await page.locator(pendingCard("helper-delete-1")).count() === 1, "helper-delete-1 is still pending");
  ok(`hostile requests refused (${fromEvil.join("; ")}; ${refused.map(([w, r]) => `${w}: ${r.status}`).join(", ")})`);

  // 3. Enter approves the chosen request; Escape denies the next with the typed reason.
  const first = await page.locator("#pending article.request").first().getAttribute("data-key");
  expect(first === `${namespace}/ops-apply-1`, `the most urgent request comes first (${first})`);
  await page.click(card("ops-apply-1"));
  await page.keyboard.press("Enter");
  await page.waitForSelector(recentCard("ops-apply-1", "approved"));
  expect((await page.locator(`${card("ops-apply-1")} .badge`).textContent()) === "Approved, waiting for the call", "approved is told apart from executed");
  ok("Enter approved ops-apply-1 as alice");
  const chosen = await page.locator("#pending article.request.selected").getAttribute("data-key");
  expect(chosen === `${namespace}/helper-delete-2`, `the next request is chosen (${chosen})`);
  await page.keyboard.press("ArrowDown");
  expect((await page.locator("#pending article.request.selected").getAttribute("data-key")) === `${namespace}/helper-delete-1`, "ArrowDown moves down");
  await page.keyboard.press("ArrowUp");
  await page.fill("#reason", "not this one");
  await page.keyboard.press("Escape");
  await page.waitForSelector(recentCard("helper-delete-2", "denied"));
  expect((await page.locator(card("helper-delete-2")).textContent()).includes("not this one"), "the reason is shown");
  ok("arrows moved the choice; Escape denied helper-delete-2 with the typed reason");

  // 4. Batch: every pending request of agent helper, after a confirmation.
  await page.click('button.approve[data-batch$="/helper"]');
  await page.waitForSelector("dialog#confirm[open]");
  expect((await page.locator("#confirm-text").textContent()).includes("Approve 2 pending request(s) of agent helper"), "the confirmation says what");
  await page.keyboard.press("Enter");
  await page.waitForSelector(recentCard("helper-delete-1", "approved"));
  await page.waitForSelector(recentCard("new-call", "approved"));
  ok("Approve all (agent helper) approved helper-delete-1 and new-call after the confirmation");

  // 5. RBAC refuses: the page says why and how to get the right.
  await page.click(card("ops-forbidden"));
  await page.keyboard.press("Enter");
  await page.waitForSelector("#notice.failed");
  const notice = await page.locator("#notice").textContent();
  expect(notice.includes("alice may not decide approvalrequest/ops-forbidden"), `the refusal names who and what: ${notice}`);
  expect(notice.includes("create rolebinding"), "the refusal shows the rolebinding that would grant it");
  expect(await page.locator(pendingCard("ops-forbidden")).count() === 1, "ops-forbidden is still pending");
  ok("the RBAC refusal is shown with the rolebinding that would grant it");

  // 6. Edit & approve: the edit is reviewed, each changed value before and after, and only the
  //    reviewed patch is approved; a change after the review needs another review.
  await page.click(`${pendingCard("cleaner-tidy-1")} button.edit`);
  await page.waitForSelector("dialog#edit[open]");
  expect((await page.inputValue("#edit-arguments")).includes('"path": "/data/c.csv"'), "the editor starts from the preview");
  expect(await page.locator("#edit-approve").isDisabled(), "nothing to approve before a review");
  await page.fill("#edit-arguments", "{ not json");
  await page.click("#edit-check");
  await page.waitForSelector("#edit-problem:not([hidden])");
  const notJson = await page.locator("#edit-problem").textContent();
  expect(notJson.includes("the edited arguments are not JSON"), `invalid JSON is refused: ${notJson}`);
  await page.fill("#edit-arguments", JSON.stringify({ path: "/data/archive/c.csv", dryRun: true }, null, 2));
  await page.click("#edit-check");
  await page.waitForSelector("#edit-review:not([hidden])");
  const cells = await page.locator("#edit-changes tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent).join(" | ")));
  const expected = ['/path | "/data/c.csv" | "/data/archive/c.csv"', "/dryRun | (absent) | true"];
  expect(JSON.stringify([...cells].sort()) === JSON.stringify([...expected].sort()), `each changed value, before and after: ${cells.join("; ")}`);
  await page.fill("#edit-arguments", JSON.stringify({ path: "/data/other.csv" }));
  expect(await page.locator("#edit-approve").isDisabled(), "changed after the review: reviewed again first");
  expect(await page.locator("#edit-review").isHidden(), "the old review is gone");
  await page.fill("#edit-arguments", JSON.stringify({ path: "/data/archive/c.csv", dryRun: true }));
  await page.click("#edit-check");
  await page.waitForSelector("#edit-review:not([hidden])");
  await page.fill("#edit-reason", "archive, not delete");
  await page.click("#edit-approve");
  await page.waitForSelector(recentCard("cleaner-tidy-1", "approved"));
  const editedCard = await page.locator(card("cleaner-tidy-1")).textContent();
  expect(editedCard.includes("approved with edits by alice"), `the card says approved with edits: ${editedCard}`);
  expect(editedCard.includes("edited by alice: ["), `the card shows the edit: ${editedCard}`);
  ok("Edit & approve showed each changed value, then approved cleaner-tidy-1 with the reviewed patch");

  // 7. Without the RBAC verb edit, the review says so and nothing is written.
  await page.click(`${pendingCard("locked-1")} button.edit`);
  await page.waitForSelector("dialog#edit[open]");
  await page.fill("#edit-arguments", JSON.stringify({ path: "/data/x.csv" }));
  await page.click("#edit-check");
  await page.waitForSelector("#edit-problem:not([hidden])");
  const noRight = await page.locator("#edit-problem").textContent();
  expect(noRight.includes("you may not edit its call: the RBAC verb edit on agents/locked"), `the missing right is named: ${noRight}`);
  expect(await page.locator("#edit-approve").isDisabled(), "nothing to approve");
  await page.keyboard.press("Escape");
  await page.waitForSelector("dialog#edit", { state: "hidden" });
  expect(await page.locator(pendingCard("locked-1")).count() === 1, "locked-1 is still pending");
  ok("without the edit right the review names the RBAC verb, and locked-1 stays pending");
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

  expect(problems.length === 0, `no errors in the page: ${problems.join("; ")}`);
} finally {
  await browser.close();
}
