// Entry point, start-up only: read the URL, load the wasm package, start the page (www/page.js:
// the playground, its state, its commands and the frame loop), wire the controls, start the
// guided tours and the frame loop.
//
// URL parameters: ?seed=N (seed mode), ?mode=live&db=NAME (live mode over IndexedDB),
// ?autoplay=0 (start paused), ?empty=1 (start with no actors), ?run=... (a share link: a
// seed-mode run, replayed to its step; see www/time.js), ?tour=ID&step=N (a guided tour,
// www/tours/; seed mode, paused). An old preset link, ?preset=RULE&rule=off|on, opens the rule's
// tour, rule-RULE, at its broken or its intact step (www/tours/engine.js `tourParams`).

import { wireControls } from "./controls.js";
import { makePage } from "./page.js";
import { findDom } from "./render/index.js";
import { loadTours } from "./tours/controller.js";

const DEFAULT_DB = "persist-playground";

/** The page's URL parameters (see the top of this file). */
export function readParams(search) {
  const p = new URLSearchParams(search);
  return {
    mode: p.get("mode") === "live" ? "live" : "seed",
    db: p.get("db") || DEFAULT_DB,
    seed: p.get("seed") || "1",
    autoplay: p.get("autoplay") !== "0",
    empty: p.get("empty") === "1",
    run: p.get("run"),
  };
}

async function loadWasm() {
  try {
    const wasm = await import("../pkg/persist_playground.js");
    await wasm.default();
    return wasm;
  } catch (err) {
    throw new Error(
      `could not load the WebAssembly package from pkg/ (build it with: bash scripts/build.sh): ${
        err instanceof Error ? err.message : String(err)
      }`,
    );
  }
}

/** Start-up: the page, its wasm and its run, the controls, the tours. */
function main() {
  const dom = findDom(document);
  const page = makePage(dom, readParams(window.location.search));
  const toursLoaded = loadTours();
  toursLoaded.catch(() => {}); // reported where it is awaited
  (async () => {
    try {
      await page.load(await loadWasm());
    } catch (err) {
      page.report({ kind: "error", text: page.errorText(err) });
      return;
    }
    wireControls(dom, page.app);
    // Every panel is drawn before the page says it is ready (the tours load after, asynchronously).
    page.ready();
    window.__playground = page.handles();
    try {
      page.beginTours(await toursLoaded);
    } catch (err) {
      page.report({ kind: "error", text: `the guided tours could not start: ${page.errorText(err)}` });
    }
    page.run();
  })();
}

main();
