// Steady panels: a panel above the pointer never shrinks, so what the pointer is on never moves up.
//
// A playing run redraws its panels many times a second, and their heights wander: the Shard
// panel's Compaction & GC list goes from two lines to three and back as GC runs come and go
// (533 and 549 px at 1280x800, seed 5). Every panel below moves with it, up and down, and a
// learner who points at a button (Crash, a writer's rate "set", Hold since) presses a spot the
// button left a frame ago: the click is lost, with nothing said (a learner walk lost 3 of 12
// clicks on a running page so).
//
// So each panel wholly above the pointer keeps the tallest height it has had since the pointer
// went below it (a `min-height` of that many pixels): it still grows, which moves what is below
// it down, but it never shrinks back, so its height settles once it has shown its tallest
// content, and the button under the pointer with it. Panels at or below the pointer are free:
// their heights move nothing the pointer is on. When the pointer goes back above a panel, or
// leaves the page, the panel goes back to its content's height (the space it held, blank at its
// bottom, closes). Only the pointer decides: a pause, a click or a key changes nothing, so
// nothing jumps when the learner stops the run to look.
//
// A guided tour places the panels itself, step by step (www/tours/controller.js): while one is
// open nothing is held.
//
// Invariant: a panel has a min-height of ours exactly while it is held, and then it is the
// largest border-box height the browser laid it out at since it was held. The min-height is set
// to a height the panel already has (from its rectangle when it becomes held, then from a
// ResizeObserver after each layout): setting it never changes a size (no observer loop, no extra
// layout). Where the pointer is, is read at the start of a frame (`update`), before the frame
// writes anything, so the read costs no layout.

/** The steady-layout keeper over the `.panel` elements of `root`. */
export function makeSteady(root = document) {
  let on = true; // no tour open
  let pointerY = null; // the pointer's y in the window, or null when it is away
  let moved = true; // the pointer moved or the page scrolled since the last update
  const held = new Map(); // panel -> the tallest border-box height it has had since it was held
  const observer = typeof ResizeObserver === "function"
    ? new ResizeObserver((entries) => {
      for (const e of entries) {
        const tallest = held.get(e.target);
        if (tallest === undefined) continue;
        const h = e.borderBoxSize?.[0]?.blockSize ?? e.target.getBoundingClientRect().height;
        if (h > tallest) {
          held.set(e.target, h);
          e.target.style.minHeight = `${h}px`;
        }
      }
    })
    : null;
  if (observer) {
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
      // A new width lays every panel out anew: each held one starts over from its new height.
      for (const p of [...held.keys()]) free(p);
      moved = true;
    });
  }

  function free(panel) {
    held.delete(panel);
    observer.unobserve(panel);
    panel.style.minHeight = "";
  }

  /**
   * At the start of a frame, before it writes: hold the panels now wholly above the pointer, free
   * the others. Reads the panels' rectangles only after the pointer moved or the page scrolled.
   */
  function update() {
    if (!observer || !moved) return;
    moved = false;
    for (const p of root.querySelectorAll(".panel")) {
      const r = p.getBoundingClientRect();
      const above = on && pointerY !== null && r.height > 0 && r.bottom <= pointerY;
      if (above && !held.has(p)) {
        held.set(p, r.height);
        p.style.minHeight = `${r.height}px`;
        observer.observe(p);
      } else if (!above && held.has(p)) {
        free(p);
      }
    }
  }

  /** Whether panels may be held at all (not while a tour is open); a change takes effect at the next update. */
  function allow(yes) {
    if (yes === on) return;
    on = yes;
    moved = true;
  }

  return { allow, update, held: () => [...held.keys()].map((p) => p.id) };
}
