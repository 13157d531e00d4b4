// Drives a headless Chromium page for the dashboard test (tests/dashboard/browser.py).
//
// Usage: node browser.mjs   (in this directory, after `npm ci`: playwright-core only, no
// browser download; the browser is the system's, given by its path in the `launch` command).
//
// Reads one JSON command per line on stdin and answers each with one JSON line on stdout:
//   {"id": 1, "op": "launch", "executablePath": "/usr/bin/chromium", "userDataDir": "...",
//    "args": ["--disable-gpu", ...]}
//   {"id": 2, "op": "goto", "url": "http://127.0.0.1:8080/"}
//   {"id": 3, "op": "fill", "selector": "#login-user", "value": "admin"}
//   {"id": 4, "op": "click", "selector": "#login-submit"}
//   {"id": 5, "op": "waitVisible", "selector": "#app", "timeout": 10000}
//   {"id": 6, "op": "waitText", "selector": "#clients-table", "text": "c1", "timeout": 10000}
//   {"id": 7, "op": "waitNoText", "selector": "#clients-table", "text": "c1", "timeout": 10000}
//   {"id": 8, "op": "text", "selector": "#login-error"}   (null when there is no such element)
//   {"id": 9, "op": "evaluate", "expression": "typeof Chart"}
//   {"id": 10, "op": "waitFor", "expression": "window.ready === true", "timeout": 10000}
//   {"id": 11, "op": "block", "pattern": "**/vendor/**"}   (answered 404 from then on)
//   {"id": 12, "op": "screenshot", "path": "shot.png"}
//   {"id": 13, "op": "close"}
// -> {"id": N, "ok": true, "value": ...} or {"id": N, "ok": false, "error": "..."}.
// Unsolicited events, also one JSON line each: {"event": "ready"} at start, and
// {"event": "console" | "pageerror" | "dialog", ...} from the page. Dialogs (confirm) are
// accepted. The browser is closed on `close`, on the end of stdin and on SIGTERM.
import readline from 'node:readline';
import { chromium } from 'playwright-core';

let context = null;
let page = null;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function closeBrowser() {
  const current = context;
  context = null;
  page = null;
  if (current) await current.close().catch(() => {});
}

function needPage() {
  if (!page) throw new Error('no page: send "launch" first');
  return page;
}

const ops = {
  async launch(cmd) {
    if (context) throw new Error('already launched');
    context = await chromium.launchPersistentContext(cmd.userDataDir, {
      executablePath: cmd.executablePath,
      headless: true,
      args: cmd.args || [],
      viewport: { width: 1280, height: 900 },
      timeout: cmd.timeout || 30000,
    });
    page = context.pages()[0] || (await context.newPage());
    page.on('console', (msg) => emit({ event: 'console', type: msg.type(), text: msg.text() }));
    page.on('pageerror', (error) => emit({ event: 'pageerror', message: String(error) }));
    page.on('dialog', (dialog) => {
      emit({ event: 'dialog', type: dialog.type(), message: dialog.message() });
      dialog.accept().catch(() => {});
    });
    return context.browser() ? context.browser().version() : null;
  },
  async goto(cmd) {
    const response = await needPage().goto(cmd.url, { timeout: cmd.timeout || 15000 });
    return response ? response.status() : null;
  },
  async fill(cmd) {
    await needPage().fill(cmd.selector, cmd.value, { timeout: cmd.timeout || 10000 });
    return null;
  },
  async click(cmd) {
    await needPage().click(cmd.selector, { timeout: cmd.timeout || 10000 });
    return null;
  },
  async waitVisible(cmd) {
    await needPage().waitForSelector(cmd.selector, {
      state: 'visible',
      timeout: cmd.timeout || 10000,
    });
    return null;
  },
  async waitText(cmd) {
    await needPage().waitForFunction(
      ([s, t]) => {
        const element = document.querySelector(s);
        return element !== null && element.textContent.includes(t);
      },
      [cmd.selector, cmd.text],
      { timeout: cmd.timeout || 10000, polling: 100 },
    );
    return null;
  },
  async waitNoText(cmd) {
    await needPage().waitForFunction(
      ([s, t]) => {
        const element = document.querySelector(s);
        return element === null || !element.textContent.includes(t);
      },
      [cmd.selector, cmd.text],
      { timeout: cmd.timeout || 10000, polling: 100 },
    );
    return null;
  },
  async text(cmd) {
    return needPage().evaluate((s) => {
      const element = document.querySelector(s);
      return element === null ? null : element.textContent;
    }, cmd.selector);
  },
  // Polls page.evaluate (DevTools' own evaluation, which the page's Content-Security-Policy
  // does not govern, unlike waitForFunction with a string, which needs 'unsafe-eval').
  async waitFor(cmd) {
    const deadline = Date.now() + (cmd.timeout || 10000);
    let last = null;
    for (;;) {
      try {
        if (await needPage().evaluate(cmd.expression)) return null;
        last = 'false';
      } catch (error) {
        last = String(error);
      }
      if (Date.now() > deadline) throw new Error(`still not true: ${cmd.expression} (${last})`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  },
  async block(cmd) {
    if (!context) throw new Error('no browser: send "launch" first');
    await context.route(cmd.pattern, (route) =>
      route.fulfill({ status: 404, contentType: 'application/json', body: '{"error": "blocked"}' }),
    );
    return null;
  },
  async evaluate(cmd) {
    return needPage().evaluate(cmd.expression);
  },
  async screenshot(cmd) {
    await needPage().screenshot({ path: cmd.path, fullPage: Boolean(cmd.fullPage) });
    return cmd.path;
  },
  async close() {
    await closeBrowser();
    return null;
  },
};

async function handle(line) {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (error) {
    emit({ event: 'fatal', error: `bad command line: ${error}` });
    return;
  }
  const op = ops[cmd.op];
  if (!op) {
    emit({ id: cmd.id, ok: false, error: `unknown op ${JSON.stringify(cmd.op)}` });
    return;
  }
  try {
    emit({ id: cmd.id, ok: true, value: await op(cmd) });
  } catch (error) {
    emit({ id: cmd.id, ok: false, error: String(error && error.stack ? error.stack : error) });
  }
}

// Commands run one at a time, in order.
let queue = Promise.resolve();
const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line.trim()) queue = queue.then(() => handle(line));
});
lines.on('close', () => {
  queue.then(closeBrowser).then(() => process.exit(0));
});
process.on('SIGTERM', () => {
  closeBrowser().then(() => process.exit(0));
});
emit({ event: 'ready' });
