// The harness the browser examples share (examples/web/*.test.mjs, examples/vite-app/vite.test.mjs):
// a static server of one folder on a free loopback port, and headless Chromium (playwright-core
// from the repository's dev dependencies, driving Debian's /usr/bin/chromium) whose pages report
// their errors. Both stop when the test file's tests are done.
import { after } from "node:test";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize } from "node:path";
import { chromium } from "playwright-core";

const TYPES = {
  ".html": "text/html",
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".css": "text/css",
  ".wasm": "application/wasm",
  ".json": "application/json",
};

/**
 * Serves the files under `root` (`index` for "/"); `route(path, url)` may answer a request
 * first with `{ type, body }`, and `onRequest(path)` sees every path. Resolves to the origin.
 */
export async function serve(root, { index = null, route = () => null, onRequest = () => {} } = {}) {
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, "http://x");
    const path = normalize(decodeURIComponent(url.pathname));
    onRequest(path);
    const answer = route(path, url);
    if (answer) return res.writeHead(200, { "content-type": answer.type }).end(answer.body);
    const file = join(root, path === "/" && index ? index : path);
    if (!file.startsWith(root)) return res.writeHead(403).end();
    try {
      const body = await readFile(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => server.close());
  return `http://127.0.0.1:${server.address().port}`;
}

/** Headless Chromium with one context (one origin's IndexedDB, shared by its pages). */
export async function chromiumContext() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
  });
  after(() => browser.close());
  return browser.newContext();
}

/** A new page of `context` whose uncaught errors and console errors go into `problems`. */
export async function watchedPage(context, problems) {
  const page = await context.newPage();
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  return page;
}

/** Loads `href` and waits until the page's body leaves data-status "loading". */
export async function load(page, href, timeout = 60_000) {
  await page.goto(href);
  await page.waitForFunction(() => document.body.dataset.status !== "loading", null, { timeout });
}
