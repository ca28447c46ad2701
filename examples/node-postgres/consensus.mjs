// A Consensus on PostgreSQL through node-postgres (`pg`), for PersistLocation.custom.
//
// One table holds every key's versions:
//
//   consensus(shard text, sequence_number bigint, data bytea, primary key (shard, sequence_number))
//
// compareAndSet is one statement: insert the new version only if the expected seqno is still the
// head (or, expecting none, if the key has no versions). Two things make it linearizable:
// - the statements run at SERIALIZABLE isolation (the pool sets default_transaction_isolation):
//   two writers that both read head 5 and insert 6 and 10 conflict, and PostgreSQL aborts one
//   (SQLSTATE 40001): that error is determinate (nothing was written) and persist retries it;
// - `ON CONFLICT DO NOTHING`: a writer that inserts a seqno someone else inserted first writes
//   nothing (rowCount 0: a mismatch) instead of failing.
// An error without a SQLSTATE during compareAndSet or truncate (the connection dropped mid-way)
// may have been committed: it is thrown with `indeterminate: true`. PersistLocation.custom
// checks compareAndSet's arguments and truncate's bound before these run.
import pg from "pg";

/** A pool for `url` whose statements run at SERIALIZABLE isolation. */
export function serializablePool(url, options = {}) {
  const extra = "-c default_transaction_isolation=serializable";
  return new pg.Pool({ connectionString: url, ...options, options: [options.options, extra].filter(Boolean).join(" ") });
}

/** Creates the table if it does not exist. */
export async function createConsensusTable(pool) {
  await pool.query(`CREATE TABLE IF NOT EXISTS consensus (
    shard text NOT NULL,
    sequence_number bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (shard, sequence_number)
  )`);
}

const version = (row) => ({ seqno: BigInt(row.sequence_number), data: new Uint8Array(row.data) });

/** Rethrows a pg error as a location error: determinate iff the server answered (a SQLSTATE). */
function rethrow(e, mayHaveHappened) {
  const err = new Error(`postgres: ${e.message}${e.code ? ` (SQLSTATE ${e.code})` : ""}`);
  if (mayHaveHappened && !(typeof e.code === "string" && /^[0-9A-Z]{5}$/.test(e.code))) err.indeterminate = true;
  throw err;
}

/** A CustomConsensus on `pool` (see serializablePool) and its `consensus` table. */
export function pgConsensus(pool) {
  const query = (text, values, mayHaveHappened = false) =>
    pool.query(text, values).catch((e) => rethrow(e, mayHaveHappened));
  return {
    async head(key) {
      const r = await query(
        "SELECT sequence_number, data FROM consensus WHERE shard = $1 ORDER BY sequence_number DESC LIMIT 1",
        [key]);
      return r.rows.length ? version(r.rows[0]) : null;
    },
    async compareAndSet(key, expected, next) {
      const data = Buffer.from(next.data.buffer, next.data.byteOffset, next.data.byteLength);
      const r = expected === null
        ? await query(
          `INSERT INTO consensus (shard, sequence_number, data)
           SELECT $1::text, $2::bigint, $3::bytea
           WHERE NOT EXISTS (SELECT 1 FROM consensus WHERE shard = $1::text)
           ON CONFLICT DO NOTHING`,
          [key, next.seqno.toString(), data], true)
        : await query(
          `INSERT INTO consensus (shard, sequence_number, data)
           SELECT $1::text, $2::bigint, $3::bytea
           WHERE (SELECT sequence_number FROM consensus WHERE shard = $1::text
                  ORDER BY sequence_number DESC LIMIT 1) = $4::bigint
           ON CONFLICT DO NOTHING`,
          [key, next.seqno.toString(), data, expected.toString()], true);
      return r.rowCount === 1;
    },
    async scan(key, from, limit) {
      const r = await query(
        `SELECT sequence_number, data FROM consensus WHERE shard = $1 AND sequence_number >= $2
         ORDER BY sequence_number ASC LIMIT $3`,
        [key, from.toString(), limit]);
      return r.rows.map(version);
    },
    async truncate(key, seqno) {
      const r = await query("DELETE FROM consensus WHERE shard = $1 AND sequence_number < $2",
        [key, seqno.toString()], true);
      return r.rowCount;
    },
    async listKeys() {
      const r = await query("SELECT DISTINCT shard FROM consensus");
      return r.rows.map((row) => row.shard);
    },
  };
}
