// The console's browser tests drive Debian's chromium through playwright-core (npm), from
// Python (tests/support/browser.py): one JSON command per line on stdin, one JSON answer
// per line on stdout. Console errors and uncaught page errors are collected for the test.
//
//   {"op": "goto", "url": "..."}            -> {"ok": true, "result": {"status": 200, "url": "..."}}
//   {"op": "nope"}                          -> {"ok": false, "error": "..."}

import readline from "node:readline";

import { chromium } from "playwright-core";

const browser = await chromium.launch({
  executablePath: process.env.X402SRV_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"], // root in a container
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
context.setDefaultTimeout(Number(process.env.X402SRV_BROWSER_TIMEOUT_MS || 20000));
const page = await context.newPage();
const problems = [];
page.on("console", (message) => {
  if (message.type() === "error") problems.push(`console: ${message.text()}`);
});
page.on("pageerror", (error) => problems.push(`page: ${error}`));

const ops = {
  async goto({ url }) {
    const response = await page.goto(url);
    return { status: response ? response.status() : null, url: page.url() };
  },
  async fill({ selector, value }) {
    await page.locator(selector).first().fill(value);
  },
  async click({ selector }) {
    await page.locator(selector).first().click();
  },
  async submit({ selector }) {
    // Clicks a submit button and waits for the navigation (or htmx swap) it starts.
    await Promise.all([page.waitForLoadState("networkidle"), page.locator(selector).first().click()]);
    return { url: page.url() };
  },
  async waitFor({ selector, text, state }) {
    const locator = text ? page.locator(selector, { hasText: text }) : page.locator(selector);
    await locator.first().waitFor({ state: state || "visible" });
  },
  async waitForUrl({ contains }) {
    await page.waitForURL((url) => url.toString().includes(contains));
    return { url: page.url() };
  },
  async text({ selector }) {
    return await page.locator(selector).first().innerText();
  },
  async count({ selector }) {
    return await page.locator(selector).count();
  },
  async attribute({ selector, name }) {
    return await page.locator(selector).first().getAttribute(name);
  },
  async url() {
    return page.url();
  },
  async viewport({ width, height }) {
    await page.setViewportSize({ width, height });
  },
  async screenshot({ path, fullPage }) {
    await page.screenshot({ path, fullPage: Boolean(fullPage) });
  },
  async scrollWidth() {
    return await page.evaluate(() => document.documentElement.scrollWidth);
  },
  async problems() {
    return problems.splice(0);
  },
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const { op, ...args } = JSON.parse(line);
  if (op === "close") break;
  let answer;
  try {
    if (!(op in ops)) throw new Error(`no op ${op}`);
    answer = { ok: true, result: (await ops[op](args)) ?? null };
  } catch (error) {
    answer = { ok: false, error: String(error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await browser.close();
