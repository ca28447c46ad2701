//! [`Blob`] and [`Consensus`] over IndexedDB (wasm32 only): the durable store of the playground.
//!
//! One database holds three object stores:
//! - `blob`: Blob key → `Uint8Array`;
//! - `blob_trash`: values that `Blob::delete` removed, kept so that `Blob::restore` can bring them
//!   back;
//! - `consensus`: compound key `[consensus key, seqno]` → `Uint8Array`, where the seqno is written as
//!   20 zero-padded decimal digits so that key order is numeric order over the whole `u64` range (JS
//!   numbers are exact only to 2^53).
//!
//! SUBTLE: a `compare_and_set` reads the head and writes the new version in ONE readwrite
//! transaction, awaiting nothing but that transaction's own requests in between. Awaiting anything
//! else (a timer, another promise) would let IndexedDB auto-commit the transaction, and the
//! compare-and-set would no longer be atomic. Readwrite transactions on one object store run one at
//! a time, across connections and tabs of an origin, which is what makes this Consensus
//! linearizable, the way several Materialize processes share one CockroachDB.
//!
//! Every readwrite call ends with `commit()` and waits for the transaction's `complete` event, so a
//! reported success is durable and a reported error means the transaction aborted: IndexedDB errors
//! are [`ExternalError::Determinate`], except that a connection closed for good answers
//! [`ExternalError::Permanent`] (kind `Closed`, at the store, naming the database).
//!
//! Opening handles first creation and version upgrades (`upgradeneeded`) and waits out `blocked`
//! (and logs it). A connection steps aside (closes itself) on `versionchange`, so that it never
//! blocks another tab's upgrade or deletion, and its next call reopens it once if the database
//! still exists; a connection closed for good answers every call at once with a permanent error
//! (see the `connection` module).
//!
//! Bytes that are not a `Uint8Array` or `ArrayBuffer`, or keys of the wrong shape (data written by
//! something else, or corrupted), give a determinate error naming the record, never a panic.

use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use js_sys::{Array, ArrayBuffer, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{
    IdbCursor, IdbCursorDirection, IdbCursorWithValue, IdbKeyRange, IdbObjectStore, IdbRequest,
    IdbTransaction, IdbTransactionMode,
};

use super::idb_keys::{parse_seqno_key, seqno_key};
use super::{
    validate_compare_and_set, Blob, BlobMetadata, CaSResult, Consensus, ExternalError, Location,
    SeqNo, VersionedData,
};

mod connection;
mod request;

pub use connection::DB_VERSION;
use connection::{Connection, BLOB, BLOB_TRASH, CONSENSUS};
use request::{await_request, commit, factory, js_err};

fn bytes_from_js(value: &JsValue, what: &dyn Fn() -> String) -> Result<Bytes, ExternalError> {
    if let Some(arr) = value.dyn_ref::<Uint8Array>() {
        Ok(Bytes::from(arr.to_vec()))
    } else if let Some(buf) = value.dyn_ref::<ArrayBuffer>() {
        Ok(Bytes::from(Uint8Array::new(buf).to_vec()))
    } else {
        Err(ExternalError::determinate(format!(
            "indexeddb: {} holds a value that is not bytes (foreign or corrupted data): {}",
            what(),
            js_type_name(value)
        )))
    }
}

fn js_type_name(value: &JsValue) -> String {
    value
        .js_typeof()
        .as_string()
        .unwrap_or_else(|| "unknown".to_string())
}

fn bytes_to_js(bytes: &[u8]) -> JsValue {
    Uint8Array::from(bytes).into()
}

fn consensus_key(key: &str, seqno: SeqNo) -> JsValue {
    Array::of2(
        &JsValue::from_str(key),
        &JsValue::from_str(&seqno_key(seqno)),
    )
    .into()
}

/// Splits a stored consensus key `[key, seqno]`, rejecting any other shape.
fn split_consensus_key(raw: &JsValue) -> Result<(String, SeqNo), ExternalError> {
    let bad = || {
        ExternalError::determinate(format!(
            "indexeddb: consensus store has a key of the wrong shape (foreign or corrupted data): {raw:?}"
        ))
    };
    let arr = raw.dyn_ref::<Array>().ok_or_else(bad)?;
    if arr.length() != 2 {
        return Err(bad());
    }
    let key = arr.get(0).as_string().ok_or_else(bad)?;
    let seqno = arr
        .get(1)
        .as_string()
        .and_then(|s| parse_seqno_key(&s))
        .ok_or_else(bad)?;
    Ok((key, seqno))
}

fn key_range(
    key: &str,
    from: SeqNo,
    to: SeqNo,
    to_open: bool,
) -> Result<IdbKeyRange, ExternalError> {
    IdbKeyRange::bound_with_lower_open_and_upper_open(
        &consensus_key(key, from),
        &consensus_key(key, to),
        false,
        to_open,
    )
    .map_err(|e| js_err("key range", e))
}

/// Every consensus key of `key`, whatever the seqno.
fn all_versions(key: &str) -> Result<IdbKeyRange, ExternalError> {
    key_range(key, SeqNo(0), SeqNo(u64::MAX), false)
}

fn store(tx: &IdbTransaction, name: &str) -> Result<IdbObjectStore, ExternalError> {
    tx.object_store(name).map_err(|e| js_err("object store", e))
}

/// A connection to one IndexedDB database that serves as both Blob and Consensus. Clones share
/// the connection; [`IdbLocation::open`] again makes a new one.
#[derive(Clone)]
pub struct IdbLocation {
    conn: Rc<Connection>,
}

impl IdbLocation {
    /// Opens (creating or upgrading as needed) the database `name`.
    pub async fn open(name: &str) -> Result<IdbLocation, ExternalError> {
        Ok(IdbLocation {
            conn: Rc::new(Connection::open(name).await?),
        })
    }

    /// Deletes the database `name`. Open connections of this crate close themselves first.
    pub async fn delete_database(name: &str) -> Result<(), ExternalError> {
        let req = factory()?
            .delete_database(name)
            .map_err(|e| js_err("delete database", e))?;
        await_request(&req, "delete database").await.map(|_| ())
    }

    /// The database name.
    pub fn name(&self) -> &str {
        self.conn.name()
    }

    /// Whether this connection is not open now: it stepped aside for another connection (its
    /// next call reopens it once, if the database still exists), or it is closed for good.
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Whether this connection is closed for good: every call fails at once with a permanent
    /// error saying why.
    pub fn is_closed_for_good(&self) -> bool {
        self.conn.is_closed_for_good()
    }

    /// How many times this connection reopened after stepping aside.
    pub fn reopens(&self) -> u64 {
        self.conn.reopens()
    }

    /// Closes the connection for good; every later call (through any clone, and every Blob and
    /// Consensus made from it) fails at once with a permanent error.
    pub fn close(&self) {
        self.conn.close("closed by its owner");
    }

    /// Writes one record as is, bypassing every encoding: for inspection tools and for tests that
    /// plant foreign or corrupted data. `store` is `"blob"`, `"blob_trash"` or `"consensus"`.
    pub async fn put_raw(
        &self,
        store_name: &str,
        key: &JsValue,
        value: &JsValue,
    ) -> Result<(), ExternalError> {
        if ![BLOB, BLOB_TRASH, CONSENSUS].contains(&store_name) {
            return Err(ExternalError::determinate(format!(
                "no object store named {store_name:?}"
            )));
        }
        let tx = self
            .conn
            .transaction(&[store_name], IdbTransactionMode::Readwrite)
            .await?;
        store(&tx, store_name)?
            .put_with_key(value, key)
            .map_err(|e| js_err("put_raw", e))?;
        commit(&tx, "put_raw").await
    }

    /// Begins a transaction on `stores` (reopening a connection that stepped aside, once).
    async fn begin(
        &self,
        stores: &[&str],
        mode: IdbTransactionMode,
    ) -> Result<IdbTransaction, ExternalError> {
        self.conn.transaction(stores, mode).await
    }

    /// This database as a [`Blob`].
    pub fn blob(&self) -> Rc<dyn Blob> {
        Rc::new(IdbBlob { conn: self.clone() })
    }

    /// This database as a [`Consensus`].
    pub fn consensus(&self) -> Rc<dyn Consensus> {
        Rc::new(IdbConsensus { conn: self.clone() })
    }

    /// Both services.
    pub fn location(&self) -> Location {
        Location {
            blob: self.blob(),
            consensus: self.consensus(),
        }
    }
}

/// [`Blob`] over an [`IdbLocation`].
pub struct IdbBlob {
    conn: IdbLocation,
}

#[async_trait(?Send)]
impl Blob for IdbBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        let tx = self
            .conn
            .begin(&[BLOB], IdbTransactionMode::Readonly)
            .await?;
        let req = store(&tx, BLOB)?
            .get(&JsValue::from_str(key))
            .map_err(|e| js_err("blob get", e))?;
        let value = await_request(&req, "blob get").await?;
        if value.is_undefined() {
            return Ok(None);
        }
        bytes_from_js(&value, &|| format!("blob {key}")).map(Some)
    }

    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        let tx = self
            .conn
            .begin(&[BLOB], IdbTransactionMode::Readonly)
            .await?;
        let os = store(&tx, BLOB)?;
        let (keys_req, values_req) = if key_prefix.is_empty() {
            (
                os.get_all_keys().map_err(|e| js_err("blob list", e))?,
                os.get_all().map_err(|e| js_err("blob list", e))?,
            )
        } else {
            // Every key with the prefix sorts in [prefix, prefix + U+FFFF]; filtered again below.
            let range = IdbKeyRange::bound(
                &JsValue::from_str(key_prefix),
                &JsValue::from_str(&format!("{key_prefix}\u{ffff}")),
            )
            .map_err(|e| js_err("blob list range", e))?;
            (
                os.get_all_keys_with_key(&range)
                    .map_err(|e| js_err("blob list", e))?,
                os.get_all_with_key(&range)
                    .map_err(|e| js_err("blob list", e))?,
            )
        };
        let keys: Array = await_request(&keys_req, "blob list keys")
            .await?
            .unchecked_into();
        let values: Array = await_request(&values_req, "blob list values")
            .await?
            .unchecked_into();
        for (k, v) in keys.iter().zip(values.iter()) {
            let key = k.as_string().ok_or_else(|| {
                ExternalError::determinate(format!(
                    "indexeddb: blob store has a key that is not a string (foreign data): {k:?}"
                ))
            })?;
            if !key.starts_with(key_prefix) {
                continue;
            }
            let size = bytes_from_js(&v, &|| format!("blob {key}"))?.len() as u64;
            f(BlobMetadata {
                key,
                size_in_bytes: size,
            });
        }
        Ok(())
    }

    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        let tx = self
            .conn
            .begin(&[BLOB, BLOB_TRASH], IdbTransactionMode::Readwrite)
            .await?;
        let k = JsValue::from_str(key);
        store(&tx, BLOB)?
            .put_with_key(&bytes_to_js(&value), &k)
            .map_err(|e| js_err("blob set", e))?;
        store(&tx, BLOB_TRASH)?
            .delete(&k)
            .map_err(|e| js_err("blob set", e))?;
        commit(&tx, "blob set").await
    }

    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        let tx = self
            .conn
            .begin(&[BLOB, BLOB_TRASH], IdbTransactionMode::Readwrite)
            .await?;
        let k = JsValue::from_str(key);
        let live = store(&tx, BLOB)?;
        let value = await_request(
            &live.get(&k).map_err(|e| js_err("blob delete", e))?,
            "blob delete",
        )
        .await?;
        if value.is_undefined() {
            commit(&tx, "blob delete").await?;
            return Ok(None);
        }
        let size = bytes_from_js(&value, &|| format!("blob {key}"))?.len();
        store(&tx, BLOB_TRASH)?
            .put_with_key(&value, &k)
            .map_err(|e| js_err("blob delete", e))?;
        live.delete(&k).map_err(|e| js_err("blob delete", e))?;
        commit(&tx, "blob delete").await?;
        Ok(Some(size))
    }

    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        let tx = self
            .conn
            .begin(&[BLOB, BLOB_TRASH], IdbTransactionMode::Readwrite)
            .await?;
        let k = JsValue::from_str(key);
        let live = store(&tx, BLOB)?;
        let trash = store(&tx, BLOB_TRASH)?;
        let count = await_request(
            &live
                .count_with_key(&k)
                .map_err(|e| js_err("blob restore", e))?,
            "blob restore",
        )
        .await?;
        if count.as_f64().unwrap_or(0.0) > 0.0 {
            return commit(&tx, "blob restore").await;
        }
        let value = await_request(
            &trash.get(&k).map_err(|e| js_err("blob restore", e))?,
            "blob restore",
        )
        .await?;
        if value.is_undefined() {
            commit(&tx, "blob restore").await?;
            return Err(ExternalError::determinate(format!(
                "unable to restore {key}: it was never written"
            )));
        }
        live.put_with_key(&value, &k)
            .map_err(|e| js_err("blob restore", e))?;
        trash.delete(&k).map_err(|e| js_err("blob restore", e))?;
        commit(&tx, "blob restore").await
    }
}

/// [`Consensus`] over an [`IdbLocation`].
pub struct IdbConsensus {
    conn: IdbLocation,
}

/// Awaits a cursor request over the versions of one key, newest first: the cursor on the newest
/// version and its seqno, or `None` if the key has no versions.
async fn newest(req: &IdbRequest) -> Result<Option<(IdbCursor, SeqNo)>, ExternalError> {
    let cursor = await_request(req, "consensus head").await?;
    if cursor.is_null() || cursor.is_undefined() {
        return Ok(None);
    }
    let cursor: IdbCursor = cursor
        .dyn_into()
        .map_err(|v| js_err("consensus head: not a cursor", v))?;
    let raw_key = cursor.key().map_err(|e| js_err("consensus head", e))?;
    let (_, seqno) = split_consensus_key(&raw_key)?;
    Ok(Some((cursor, seqno)))
}

/// Reads the head of `key` inside `tx` (one cursor request, newest first).
async fn head_in(os: &IdbObjectStore, key: &str) -> Result<Option<VersionedData>, ExternalError> {
    let req = os
        .open_cursor_with_range_and_direction(&all_versions(key)?.into(), IdbCursorDirection::Prev)
        .map_err(|e| js_err("consensus head", e))?;
    let Some((cursor, seqno)) = newest(&req).await? else {
        return Ok(None);
    };
    let value = cursor
        .unchecked_into::<IdbCursorWithValue>()
        .value()
        .map_err(|e| js_err("consensus head", e))?;
    let data = bytes_from_js(&value, &|| format!("consensus {key} {seqno}"))?;
    Ok(Some(VersionedData { seqno, data }))
}

/// Reads only the head's seqno inside `tx`: a key cursor, newest first, which loads no value (a
/// compare_and_set and a truncate need nothing more).
async fn head_seqno_in(os: &IdbObjectStore, key: &str) -> Result<Option<SeqNo>, ExternalError> {
    let req = os
        .open_key_cursor_with_range_and_direction(
            &all_versions(key)?.into(),
            IdbCursorDirection::Prev,
        )
        .map_err(|e| js_err("consensus head", e))?;
    Ok(newest(&req).await?.map(|(_, seqno)| seqno))
}

/// Whether the head of `key` is exactly `expected`, inside `tx`. For `Some(s)`, one forward
/// request for at most two keys from `s` on: the head is `s` iff the first is `s` and there is
/// no second (seqnos may skip, so "`s` exists and `s + 1` does not" would not do). A forward
/// seek costs less than the reverse cursor [`head_seqno_in`] opens, and this runs on every
/// compare_and_set.
async fn head_is_in(
    os: &IdbObjectStore,
    key: &str,
    expected: Option<SeqNo>,
) -> Result<bool, ExternalError> {
    let Some(expected) = expected else {
        return Ok(head_seqno_in(os, key).await?.is_none());
    };
    let range = key_range(key, expected, SeqNo(u64::MAX), false)?;
    let req = os
        .get_all_keys_with_key_and_limit(&range, 2)
        .map_err(|e| js_err("consensus compare_and_set", e))?;
    let keys: Array = await_request(&req, "consensus compare_and_set")
        .await?
        .unchecked_into();
    if keys.length() != 1 {
        return Ok(false);
    }
    let (_, first) = split_consensus_key(&keys.get(0))?;
    Ok(first == expected)
}

#[async_trait(?Send)]
impl Consensus for IdbConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        let tx = self
            .conn
            .begin(&[CONSENSUS], IdbTransactionMode::Readonly)
            .await?;
        head_in(&store(&tx, CONSENSUS)?, key).await
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        validate_compare_and_set(expected, &new)?;
        let tx = self
            .conn
            .begin(&[CONSENSUS], IdbTransactionMode::Readwrite)
            .await?;
        let os = store(&tx, CONSENSUS)?;
        // SUBTLE: between this read and the put below, await nothing but this transaction's own
        // requests, or the transaction auto-commits and the compare-and-set is no longer atomic.
        if !head_is_in(&os, key, expected).await? {
            // Nothing was written; the transaction commits empty on its own.
            return Ok(CaSResult::ExpectationMismatch);
        }
        os.put_with_key(&bytes_to_js(&new.data), &consensus_key(key, new.seqno))
            .map_err(|e| js_err("consensus compare_and_set", e))?;
        commit(&tx, "consensus compare_and_set").await?;
        Ok(CaSResult::Committed)
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        if limit == 0 {
            // getAll treats a count of 0 as "no limit".
            return Ok(Vec::new());
        }
        let tx = self
            .conn
            .begin(&[CONSENSUS], IdbTransactionMode::Readonly)
            .await?;
        let os = store(&tx, CONSENSUS)?;
        let range = key_range(key, from, SeqNo(u64::MAX), false)?;
        let (keys_req, values_req) = match u32::try_from(limit) {
            Ok(n) => (
                os.get_all_keys_with_key_and_limit(&range, n),
                os.get_all_with_key_and_limit(&range, n),
            ),
            Err(_) => (
                os.get_all_keys_with_key(&range),
                os.get_all_with_key(&range),
            ),
        };
        let keys_req = keys_req.map_err(|e| js_err("consensus scan", e))?;
        let values_req = values_req.map_err(|e| js_err("consensus scan", e))?;
        let keys: Array = await_request(&keys_req, "consensus scan")
            .await?
            .unchecked_into();
        let values: Array = await_request(&values_req, "consensus scan")
            .await?
            .unchecked_into();
        keys.iter()
            .zip(values.iter())
            .map(|(k, v)| {
                let (_, seqno) = split_consensus_key(&k)?;
                let data = bytes_from_js(&v, &|| format!("consensus {key} {seqno}"))?;
                Ok(VersionedData { seqno, data })
            })
            .collect()
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        let tx = self
            .conn
            .begin(&[CONSENSUS], IdbTransactionMode::Readwrite)
            .await?;
        let os = store(&tx, CONSENSUS)?;
        let Some(head) = head_seqno_in(&os, key).await? else {
            return Err(ExternalError::determinate(format!(
                "cannot truncate {key} to {seqno}: the key has no versions"
            )));
        };
        if seqno > head {
            return Err(ExternalError::determinate(format!(
                "cannot truncate {key} to {seqno}: beyond the head {head}"
            )));
        }
        if seqno == SeqNo(0) {
            // Nothing sorts below v0 (and an empty half-open range is a DataError in IndexedDB).
            return Ok(0);
        }
        let range = key_range(key, SeqNo(0), seqno, true)?;
        let count_req = os
            .count_with_key(&range)
            .map_err(|e| js_err("consensus truncate", e))?;
        let count = await_request(&count_req, "consensus truncate").await?;
        os.delete(&range)
            .map_err(|e| js_err("consensus truncate", e))?;
        commit(&tx, "consensus truncate").await?;
        Ok(count.as_f64().unwrap_or(0.0) as usize)
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        let tx = self
            .conn
            .begin(&[CONSENSUS], IdbTransactionMode::Readonly)
            .await?;
        let req = store(&tx, CONSENSUS)?
            .get_all_keys()
            .map_err(|e| js_err("consensus list_keys", e))?;
        let keys: Array = await_request(&req, "consensus list_keys")
            .await?
            .unchecked_into();
        let mut out: Vec<String> = Vec::new();
        for k in keys.iter() {
            let (key, _) = split_consensus_key(&k)?;
            if out.last() != Some(&key) {
                out.push(key);
            }
        }
        Ok(out)
    }
}
