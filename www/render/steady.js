// Steady panels: a panel above the pointer never shrinks, so what the pointer is on never moves up.
//
// A playing run redraws its panels many times a second, and their heights wander: the Shard
// panel's since line gains and loses a sentence as batches come to span it, its Compaction & GC
// list a line (533 and 549 px at 1280x800, seed 5). Every panel below moves with it, up and down, and a
// learner who points at a button (Crash, a writer's rate "set", Hold since) presses a spot the
// button left a frame ago: the click is lost, with nothing said (a learner walk lost 3 of 12
// clicks on a running page so).
//
// So each panel wholly above the pointer keeps the tallest height it has had since a moment
// before the pointer went below it (RECENT_MS; a `min-height` of that many pixels): it still
// grows, which moves what is below it down, but it never shrinks back, so its height settles
// once it has shown its tallest content, and the button under the pointer with it. The moment
// before counts because a panel that flips between two heights several times a second would
// otherwise be held at the lower one and push the button down at its next flip, between the
// pointer's arrival and the press (a learner walk lost a click to exactly that); held at the
// taller one at once, it moves the button only while the pointer is still on its way.
//
// Panels at or below the pointer are free: their heights move nothing the pointer is on. When
// the pointer goes back above a panel, or leaves the page, the panel goes back to its content's
// height (the space it held, blank at its bottom, closes). Only the pointer decides: a pause, a
// click or a key changes nothing, so nothing jumps when the learner stops the run to look.
//
// A guided tour places the panels itself, step by step (www/tours/controller.js): while one is
// open nothing is held.
//
// Invariant: a panel has a min-height of ours exactly while it is held, and then it is the
// largest border-box height the browser laid it out at since RECENT_MS before it was held. Set
// when it becomes held (at the start of a frame, outside the observer), and then from the
// ResizeObserver only to a height the panel already has: the observer never changes a size (no
// observer loop, no extra layout). Where the pointer is, is read at the start of a frame
// (`update`), before the frame writes anything, so the read costs no layout.

/** How far back a panel's heights count when it becomes held. */
const RECENT_MS = 3000;

/** The steady-layout keeper over the `.panel` elements of `root`. */
export function makeSteady(root = document) {
  let on = true; // no tour open
  let pointerY = null; // the pointer's y in the window, or null when it is away
  let moved = true; // the pointer moved or the page scrolled since the last update
  const held = new Map(); // panel -> the tallest border-box height it has had since it was held
  // panel -> its heights as laid out, [time, px] from each time on, over the last RECENT_MS (and
  // the one in effect when that began).
  const heights = new Map();
  const observer = typeof ResizeObserver === "function"
    ? new ResizeObserver((entries) => {
      const now = performance.now();
      for (const e of entries) {
        const h = e.borderBoxSize?.[0]?.blockSize ?? e.target.getBoundingClientRect().height;
        const seen = heights.get(e.target) ?? [];
        seen.push([now, h]);
        while (seen.length > 1 && seen[1][0] < now - RECENT_MS) seen.shift();
        heights.set(e.target, seen);
        const tallest = held.get(e.target);
        if (tallest !== undefined && h > tallest) {
          held.set(e.target, h);
          e.target.style.minHeight = `${h}px`;
        }
      }
    })
    : null;
  /** The tallest `panel` has been over the last RECENT_MS, at least `h` (its height now). */
  const tallestRecently = (panel, h) => {
    const since = performance.now() - RECENT_MS;
    const seen = heights.get(panel) ?? [];
    // From the last height laid out before the window began (it was in effect at its start).
    let from = 0;
    seen.forEach(([t], i) => { if (t < since) from = i; });
    return seen.slice(from).reduce((m, [, px]) => Math.max(m, px), h);
  };
  if (observer) {
    for (const p of root.querySelectorAll(".panel")) observer.observe(p);
    const at = (y) => {
      pointerY = y;
      moved = true;
    };
    addEventListener("pointermove", (e) => at(e.clientY), { capture: true, passive: true });
    addEventListener("pointerdown", (e) => at(e.clientY), { capture: true, passive: true });
    document.documentElement.addEventListener("pointerleave", () => at(null), { passive: true });
    addEventListener("blur", (e) => { if (e.target === window) at(null); });
    addEventListener("scroll", () => { moved = true; }, { capture: true, passive: true });
    addEventListener("resize", () => {
      // A new width lays every panel out anew: each starts over from its new height.
      for (const p of [...held.keys()]) free(p);
      heights.clear();
      moved = true;
    });
  }

  function free(panel) {
    held.delete(panel);
    panel.style.minHeight = "";
  }

  /**
   * At the start of a frame, before it writes: hold the panels now wholly above the pointer, free
   * the others; `allowed` false (a tour open) frees them all. Reads the panels' rectangles only
   * after the pointer moved, the page scrolled or `allowed` changed.
   */
  function update(allowed) {
    if (allowed !== on) {
      on = allowed;
      moved = true;
    }
    if (!observer || !moved) return;
    moved = false;
    for (const p of root.querySelectorAll(".panel")) {
      const r = p.getBoundingClientRect();
      const above = on && pointerY !== null && r.height > 0 && r.bottom <= pointerY;
      if (above && !held.has(p)) {
        const h = tallestRecently(p, r.height);
        held.set(p, h);
        p.style.minHeight = `${h}px`;
      } else if (!above && held.has(p)) {
        free(p);
      }
    }
  }

  return { update };
}
