// persist-playground/fs as an ES module (the implementation is fs-location.cjs).
import { createRequire } from "node:module";
const m = createRequire(import.meta.url)("./index.cjs");
export const { fsBlob, fsConsensus, fsLocation } = m;
