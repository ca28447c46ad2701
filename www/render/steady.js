// Steady panels: while a run plays on its own, no panel shrinks, so nothing below it moves up.
//
// A playing run redraws its panels many times a second, and their heights wander: the Shard
// panel's Compaction & GC list goes from two lines to three and back as GC runs come and go,
// its rows line wraps or not. Every panel below moves with it, up and down, and a learner who
// points at a button (Crash, Hold since, set) presses a spot the button left a frame ago: the
// click is lost, with nothing said (a learner walk lost 3 of 12 clicks on a running page so).
//
// So while it holds, each panel keeps the tallest height it has had (a `min-height` of that
// many pixels): panels still grow, which moves what is below them down, but never back up, and
// a panel's height settles once the run has shown its tallest content. The space a shrinking
// panel leaves is blank at its bottom until the hold lets go.
//
// The page holds only while a run plays by itself with no tour open (a tour places its panels
// itself, step by step, and settles paused). It lets go (every panel back to its content's
// height) when that stops, and at every input of the learner's (a click, a key, a toggle, a
// resize): what a learner does may change the layout, and should show at once.
//
// Invariant: while held, a panel's min-height is the largest border-box height the browser laid
// it out at since the hold began (or since the learner's last input); set from a ResizeObserver,
// after layout, to the height it already has, so setting it never changes a size (no observer
// loop, no extra layout). Released, no panel has a min-height of ours.

/** The steady-layout keeper over the `.panel` elements of `root`. */
export function makeSteady(root = document) {
  let held = false;
  const tallest = new Map(); // panel -> px
  const panels = () => [...root.querySelectorAll(".panel")];
  const observer = typeof ResizeObserver === "function"
    ? new ResizeObserver((entries) => {
      if (!held) return;
      for (const e of entries) {
        const h = e.borderBoxSize?.[0]?.blockSize ?? e.target.getBoundingClientRect().height;
        if (h > (tallest.get(e.target) ?? 0)) {
          tallest.set(e.target, h);
          e.target.style.minHeight = `${h}px`;
        }
      }
    })
    : null;

  /** Every panel back to its content's height; if held, the tallest heights start over from it. */
  function release() {
    if (!observer) return;
    tallest.clear();
    for (const p of panels()) {
      if (p.style.minHeight) p.style.minHeight = "";
      // Observed again: the observer reports each panel's height at the next layout (an
      // observation always starts with one), which starts its tallest over.
      observer.unobserve(p);
      if (held) observer.observe(p);
    }
  }

  /** Holds (`on`) or lets go; a change of either releases once. */
  function hold(on) {
    if (!observer || on === held) return;
    held = on;
    release();
  }

  return { hold, release, isHeld: () => held };
}
