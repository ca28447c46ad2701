import type { CustomBlob, CustomConsensus, FaultOptions, PersistLocation } from "../node/persist_playground.js";

/** Options of `fsLocation`. */
export interface FsLocationOptions {
    /** The location's name. Default `fs:<absolute dir>`. */
    name?: string;
    /** Put the location behind the seeded fault decorator. */
    faults?: FaultOptions;
}

/**
 * A Blob on the directory `dir` (Node, `node:fs`): one file per key under `dir/blob/`, written
 * to a temporary file and renamed into place (atomic); deleted keys move to `dir/blob-deleted/`,
 * so `restore` can bring them back. Several processes may share the directory.
 */
export function fsBlob(dir: string): CustomBlob;

/**
 * A Consensus on the directory `dir` (Node, `node:fs`): one file per version under
 * `dir/consensus/<key>/`, named after the version it replaced, and created with `link(2)`, which
 * fails if the name exists: of processes racing to replace one head, exactly one wins.
 */
export function fsConsensus(dir: string): CustomConsensus;

/**
 * A ready `PersistLocation` on the directory `dir` (created if needed): `fsBlob(dir)` and
 * `fsConsensus(dir)` through `PersistLocation.custom`. Clients on it draw their ids from the
 * platform's CSPRNG, so processes sharing the directory never share a writer id.
 */
export function fsLocation(dir: string, options?: FsLocationOptions): PersistLocation;
