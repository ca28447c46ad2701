// The README's "Use it as a library" code blocks, as the tests run them
// (examples/node/test/readme.test.mjs under Node, examples/web/readme.test.mjs in a page).
//
// A block is a fenced ```js block of that section; its info string may add tags after the
// language (```js browser: it needs a browser, so Node skips it). Blocks build on each other
// (`memory` from the first, `client` and `reader` from the shard's), so they run in order as one
// module. The only change to what is written: the `import ... from "persist-playground"` lines
// of all blocks are merged into one at the top (a module cannot import one name twice).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const README = join(dirname(fileURLToPath(import.meta.url)), "..", "README.md");

/** The js blocks of the section: `{ tags, code, line }` in order. */
export function librarySnippets(text = readFileSync(README, "utf8")) {
  const start = text.indexOf("\n## Use it as a library");
  if (start < 0) throw new Error("README.md has no \"## Use it as a library\" section");
  const end = text.indexOf("\n## ", start + 1);
  const section = text.slice(start, end < 0 ? undefined : end);
  const firstLine = text.slice(0, start).split("\n").length;
  const blocks = [];
  const fence = /^```(\S*)([^\n]*)\n([\s\S]*?)^```\s*$/gm;
  for (let m; (m = fence.exec(section)); ) {
    if (m[1] !== "js") continue;
    blocks.push({
      tags: new Set(m[2].trim().split(/\s+/).filter(Boolean)),
      code: m[3],
      line: firstLine + section.slice(0, m.index).split("\n").length - 1,
    });
  }
  return blocks;
}

const IMPORT = /^import\s+(?:(\w+)\s*,\s*)?\{([^}]*)\}\s*from\s*"persist-playground";[ \t]*\n?/m;

/** One module from `blocks`: their imports of "persist-playground" merged at the top. */
export function compose(blocks, epilogue = "") {
  let defaultName = null;
  const names = new Set();
  const bodies = blocks.map(({ code, line }) => {
    const m = code.match(IMPORT);
    if (!m) return `// README.md line ${line}\n${code}`;
    if (m[1]) defaultName = m[1];
    for (const n of m[2].split(",").map((s) => s.trim()).filter(Boolean)) names.add(n);
    return `// README.md line ${line}\n${code.replace(IMPORT, "")}`;
  });
  const head = names.size || defaultName
    ? `import ${defaultName ? `${defaultName}, ` : ""}{ ${[...names].join(", ")} } from "persist-playground";\n`
    : "";
  return head + bodies.join("\n") + "\n" + epilogue;
}
