// The package's TypeScript declarations, checked by tsc (TypeScript from the npm registry, pinned
// in ../package.json) against the installed package: a correct file passes under Node's and a
// browser bundler's resolution, a file with one deliberate type error fails on exactly that line,
// and no declaration file says `any`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const project = join(here, "..");
const tsc = (config) =>
  spawnSync(process.execPath, [join(project, "node_modules/typescript/bin/tsc"), "-p", join(project, "types", config)], {
    cwd: project,
    encoding: "utf8",
  });

test("tsc --noEmit accepts a file that uses the declarations (Node resolution)", () => {
  const r = tsc("tsconfig.json");
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("tsc --noEmit accepts the same file under a browser bundler's resolution", () => {
  const r = tsc("tsconfig.browser.json");
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("tsc --noEmit fails on the deliberate type error, and only on it", () => {
  const r = tsc("tsconfig.bad.json");
  assert.notEqual(r.status, 0, "tsc accepted a string for a time");
  const errors = r.stdout.split("\n").filter((l) => /error TS\d+/.test(l));
  assert.equal(errors.length, 1, r.stdout);
  assert.match(errors[0], /bad\.ts\(8,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/);
});

// Every `any` in a declaration file fails this test: the library and the playground facade both
// name their types (src/wasm.rs closes its gaps with unchecked_param_type / unchecked_return_type).
test("no declaration file of the package says any", () => {
  const pkg = join(project, "node_modules/persist-playground");
  const files = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.d\.(m|c)?ts$/.test(name)) files.push(path);
    }
  };
  walk(pkg);
  assert.ok(files.length >= 6, `found only ${files}`);
  for (const file of files) {
    const code = readFileSync(file, "utf8")
      .replace(/\/\*[\s\S]*?\*\//g, "")
      .replace(/\/\/.*$/gm, "");
    let klass = "";
    for (const line of code.split("\n")) {
      const opened = /^export (?:declare )?class (\w+)/.exec(line);
      if (opened) klass = opened[1];
      else if (/^}/.test(line)) klass = "";
      if (!/\bany\b/.test(line)) continue;
      assert.fail(`${file} says any: ${klass}:${line}`);
    }
  }
});
