//! A location JavaScript supplies: `PersistLocation.custom({ blob, consensus })` maps objects of
//! async functions onto the crate's [`Blob`] and [`Consensus`] traits, so a user can put persist
//! on their own store (files, a database, a server) and prove it with `runLocationConformance`.
//!
//! The JS side (typed as `CustomBlob` and `CustomConsensus` in the `.d.ts`):
//! - `blob.get(key)` → `Uint8Array | null`; `blob.set(key, value)`; `blob.delete(key)` → the
//!   size of what was there, or `null`; `blob.list(prefix)` → `[{ key, sizeInBytes }]`;
//!   optionally `blob.restore(key)` (un-delete; without it, restore succeeds only for a key that
//!   exists, and the conformance suite's restore case fails);
//! - `consensus.head(key)` → `{ seqno, data } | null`; `consensus.compareAndSet(key, expected,
//!   next)` → `true` if `next` is now the head, `false` if the head was not `expected` (`null`:
//!   no versions); `consensus.scan(key, from, limit)` → versions with `seqno >= from`,
//!   ascending, at most `limit`; `consensus.truncate(key, seqno)` → how many versions below
//!   `seqno` it deleted; `consensus.listKeys()` → every key with versions.
//!
//! Seqnos are `bigint` both ways (a safe-integer `number` is accepted back). Functions may
//! return a value or a Promise of it.
//!
//! What this adapter does so that a JS implementation stays small:
//! - `compareAndSet`'s argument checks (the new seqno above the expected one, at most
//!   `i64::MAX`) run here, before JS is called;
//! - `truncate` first reads the head and refuses a seqno beyond it (or a key with no versions),
//!   as the contract says. The head only moves up, so a truncate that passes this check is
//!   valid when it runs;
//! - results are checked: a `scan` out of order, beyond its limit or below `from`, a head or
//!   a value of the wrong shape, is a permanent error naming the function (a broken
//!   implementation does not heal by retrying).
//!
//! After the location's `close()`, no function is called again: every call (background
//! compaction and GC included) ends in a permanent `Closed` error, so nothing retries against a
//! store the user shut down.
//!
//! Errors: a function that throws (or rejects) with an object whose `indeterminate` property is
//! `true` maps to [`ExternalError::Indeterminate`] (the operation may have happened: a timeout,
//! a connection lost mid-write); any other thrown value to [`ExternalError::Determinate`] (it did
//! not happen). Both are retried by persist with back-off.

use std::cell::Cell;
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use js_sys::{Array, BigInt, Function, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::convert;
use super::errors::{LibError, LibResult};
use crate::location::{
    validate_compare_and_set, Blob, BlobMetadata, BrokenAt, CaSResult, Consensus, ExternalError,
    PermanentKind, SeqNo, VersionedData,
};

#[wasm_bindgen(typescript_custom_section)]
const TS_CUSTOM: &'static str = r#"
/** Something a custom location's function returns: the value, or a Promise of it. */
export type Awaitable<T> = T | Promise<T>;
/** A Blob key and the size of its value. */
export interface BlobEntry {
    key: string;
    sizeInBytes: number;
}
/**
 * A Blob (a key-to-bytes map with atomic writes) written in JavaScript. Contract (what
 * `runLocationConformance` checks): `set` is atomic and may overwrite; `get` of an absent key
 * is `null`; `delete` returns the size of what was there, or `null`; `list(prefix)` returns every
 * key starting with `prefix`, in any order. Throw an Error with `indeterminate: true` when the
 * outcome is unknown (a timeout); any other throw means "it did not happen".
 */
export interface CustomBlob {
    get(key: string): Awaitable<Uint8Array | null | undefined>;
    set(key: string, value: Uint8Array): Awaitable<void>;
    delete(key: string): Awaitable<number | null | undefined>;
    list(prefix: string): Awaitable<BlobEntry[]>;
    /** Brings a deleted key back if it can; must fail for a key never written. Optional:
     *  without it, restore succeeds only for a key that exists. */
    restore?(key: string): Awaitable<void>;
}
/** One version of a Consensus key. */
export interface VersionedData {
    seqno: bigint;
    data: Uint8Array;
}
/**
 * A Consensus (a linearizable, versioned register per key) written in JavaScript. Contract:
 * `head` is the version with the greatest seqno, or `null`; `compareAndSet` writes `next` and
 * returns `true` iff the head's seqno is exactly `expected` (`null`: the key has no versions),
 * else returns `false` and writes nothing, atomically with respect to every other process;
 * `scan` returns up to `limit` versions with `seqno >= from`, ascending; `truncate` deletes the
 * versions below `seqno` and returns how many; `listKeys` lists every key with versions. The
 * library checks `compareAndSet`'s arguments and `truncate`'s bound before calling these.
 */
export interface CustomConsensus {
    head(key: string): Awaitable<VersionedData | null | undefined>;
    compareAndSet(key: string, expected: bigint | null, next: VersionedData): Awaitable<boolean>;
    scan(key: string, from: bigint, limit: number): Awaitable<VersionedData[]>;
    truncate(key: string, seqno: bigint): Awaitable<number>;
    listKeys(): Awaitable<string[]>;
}
/** Options of `PersistLocation.custom`. */
export interface CustomLocationOptions {
    blob: CustomBlob;
    consensus: CustomConsensus;
    /** Shown as the location's `name` and in error messages. Default "custom". */
    name?: string;
    /** Put the location behind the fault decorator. */
    faults?: FaultOptions;
}
/** An Error a custom location's function may throw: `indeterminate: true` means the
 *  operation may have happened. */
export interface LocationError extends Error {
    indeterminate?: boolean;
}
"#;

/// An object and the functions named `names` on it (checked to be functions).
struct Methods {
    what: &'static str,
    store: String,
    closed: Rc<Cell<bool>>,
    this: JsValue,
    fns: Vec<(&'static str, Option<Function>)>,
}

impl Methods {
    fn new(
        v: &JsValue,
        what: &'static str,
        (store, closed): (&str, &Rc<Cell<bool>>),
        required: &[&'static str],
        optional: &[&'static str],
    ) -> LibResult<Methods> {
        if !v.is_object() || v.is_null() {
            return Err(LibError::type_error(format!(
                "options.{what} must be an object of functions ({}), got {}",
                required.join(", "),
                convert::describe(v)
            )));
        }
        let mut fns = Vec::new();
        for (name, needed) in required
            .iter()
            .map(|n| (*n, true))
            .chain(optional.iter().map(|n| (*n, false)))
        {
            let f = Reflect::get(v, &name.into()).unwrap_or(JsValue::UNDEFINED);
            if f.is_undefined() && !needed {
                fns.push((name, None));
                continue;
            }
            let Some(f) = f.dyn_ref::<Function>() else {
                return Err(LibError::type_error(format!(
                    "options.{what}.{name} must be a function, got {}",
                    convert::describe(&f)
                )));
            };
            fns.push((name, Some(f.clone())));
        }
        Ok(Methods {
            what,
            store: store.to_string(),
            closed: Rc::clone(closed),
            this: v.clone(),
            fns,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.fns.iter().any(|(n, f)| *n == name && f.is_some())
    }

    /// Calls `name(args...)` and awaits what it returns.
    async fn call(&self, name: &str, args: &[JsValue]) -> Result<JsValue, ExternalError> {
        // After close(), nothing reaches the user's functions: background work (compaction,
        // GC) that still runs meets a permanent error and stops, instead of retrying against a
        // store the user has shut down.
        if self.closed.get() {
            return Err(ExternalError::permanent(
                &self.store,
                BrokenAt::Store,
                PermanentKind::Closed,
                format!("custom {}.{name}: the location is closed", self.what),
            ));
        }
        let f = self
            .fns
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, f)| f.clone())
            .ok_or_else(|| {
                ExternalError::determinate(format!("{}.{name} is missing", self.what))
            })?;
        let args: Array = args.iter().collect();
        let returned = f
            .apply(&self.this, &args)
            .map_err(|e| thrown(self.what, name, &e))?;
        JsFuture::from(Promise::resolve(&returned))
            .await
            .map_err(|e| thrown(self.what, name, &e))
    }

    /// A permanent error: `name` returned something of the wrong shape.
    fn broken(&self, store: &str, name: &str, detail: String) -> ExternalError {
        ExternalError::permanent(
            store,
            BrokenAt::Store,
            PermanentKind::Inconsistent,
            format!("custom {}.{name} {detail}", self.what),
        )
    }
}

/// What a thrown value says, as a storage error.
fn thrown(what: &str, name: &str, e: &JsValue) -> ExternalError {
    let message = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| convert::describe(e));
    let indeterminate = e.is_object()
        && Reflect::get(e, &"indeterminate".into())
            .ok()
            .and_then(|v| v.as_bool())
            == Some(true);
    let msg = format!("custom {what}.{name} threw: {message}");
    if indeterminate {
        ExternalError::indeterminate(msg)
    } else {
        ExternalError::determinate(msg)
    }
}

/// Bytes from a `Uint8Array` (a Node `Buffer` is one) or an `ArrayBuffer`.
fn bytes_of(v: &JsValue) -> Option<Bytes> {
    if let Some(a) = v.dyn_ref::<Uint8Array>() {
        return Some(Bytes::from(a.to_vec()));
    }
    if let Some(b) = v.dyn_ref::<js_sys::ArrayBuffer>() {
        return Some(Bytes::from(Uint8Array::new(b).to_vec()));
    }
    None
}

fn bytes_to_js(b: &[u8]) -> JsValue {
    Uint8Array::from(b).into()
}

fn seqno_to_js(s: SeqNo) -> JsValue {
    BigInt::from(s.0).into()
}

/// `{ seqno, data }`, or a description of what is wrong with it.
fn versioned(v: &JsValue) -> Result<VersionedData, String> {
    if !v.is_object() || v.is_null() {
        return Err(format!(
            "returned {} where a {{ seqno, data }} was expected",
            convert::describe(v)
        ));
    }
    let seqno = Reflect::get(v, &"seqno".into()).unwrap_or(JsValue::UNDEFINED);
    let seqno = convert::uint64(&seqno, "seqno")
        .map_err(|e| format!("returned a bad value: {}", e.message))?;
    if SeqNo(seqno) > SeqNo::maximum() {
        return Err(format!("returned seqno {seqno}, beyond i64::MAX"));
    }
    let data = Reflect::get(v, &"data".into()).unwrap_or(JsValue::UNDEFINED);
    let data = bytes_of(&data).ok_or_else(|| {
        format!(
            "returned data {} where a Uint8Array was expected",
            convert::describe(&data)
        )
    })?;
    Ok(VersionedData {
        seqno: SeqNo(seqno),
        data,
    })
}

/// A [`Blob`] whose operations are JS functions. See the module docs.
pub struct JsBlob {
    store: String,
    m: Methods,
}

impl JsBlob {
    /// Checks `v` has the functions of a `CustomBlob`.
    pub fn new(v: &JsValue, store: &str, closed: &Rc<Cell<bool>>) -> LibResult<JsBlob> {
        Ok(JsBlob {
            store: store.to_string(),
            m: Methods::new(
                v,
                "blob",
                (store, closed),
                &["get", "set", "delete", "list"],
                &["restore"],
            )?,
        })
    }
}

#[async_trait(?Send)]
impl Blob for JsBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        let v = self.m.call("get", &[key.into()]).await?;
        if v.is_null() || v.is_undefined() {
            return Ok(None);
        }
        bytes_of(&v).map(Some).ok_or_else(|| {
            self.m.broken(
                &self.store,
                "get",
                format!(
                    "returned {} for {key:?} where a Uint8Array or null was expected",
                    convert::describe(&v)
                ),
            )
        })
    }

    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        let v = self.m.call("list", &[key_prefix.into()]).await?;
        let bad = |what: String| self.m.broken(&self.store, "list", what);
        if !Array::is_array(&v) {
            return Err(bad(format!(
                "returned {} where an array of {{ key, sizeInBytes }} was expected",
                convert::describe(&v)
            )));
        }
        let mut out = Vec::new();
        for (i, e) in Array::from(&v).iter().enumerate() {
            let key = Reflect::get(&e, &"key".into())
                .ok()
                .and_then(|k| k.as_string())
                .ok_or_else(|| bad(format!("returned an entry [{i}] without a string key")))?;
            let size = Reflect::get(&e, &"sizeInBytes".into()).unwrap_or(JsValue::UNDEFINED);
            let size = convert::uint64(&size, "sizeInBytes").map_err(|err| {
                bad(format!(
                    "returned entry {key:?} with a bad size: {}",
                    err.message
                ))
            })?;
            if !key.starts_with(key_prefix) {
                return Err(bad(format!(
                    "returned key {key:?}, which does not start with the prefix {key_prefix:?}"
                )));
            }
            out.push(BlobMetadata {
                key,
                size_in_bytes: size,
            });
        }
        for m in out {
            f(m);
        }
        Ok(())
    }

    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        self.m
            .call("set", &[key.into(), bytes_to_js(&value)])
            .await?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        let v = self.m.call("delete", &[key.into()]).await?;
        if v.is_null() || v.is_undefined() {
            return Ok(None);
        }
        let size = convert::uint64(&v, "size").map_err(|e| {
            self.m.broken(
                &self.store,
                "delete",
                format!(
                    "returned a bad value: {} (expected the size deleted, or null)",
                    e.message
                ),
            )
        })?;
        Ok(Some(usize::try_from(size).unwrap_or(usize::MAX)))
    }

    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        if self.m.has("restore") {
            self.m.call("restore", &[key.into()]).await?;
            return Ok(());
        }
        match self.get(key).await? {
            Some(_) => Ok(()),
            None => Err(ExternalError::determinate(format!(
                "custom blob cannot restore {key:?}: it is absent and the blob has no restore function"
            ))),
        }
    }
}

/// A [`Consensus`] whose operations are JS functions. See the module docs.
pub struct JsConsensus {
    store: String,
    m: Methods,
}

impl JsConsensus {
    /// Checks `v` has the functions of a `CustomConsensus`.
    pub fn new(v: &JsValue, store: &str, closed: &Rc<Cell<bool>>) -> LibResult<JsConsensus> {
        Ok(JsConsensus {
            store: store.to_string(),
            m: Methods::new(
                v,
                "consensus",
                (store, closed),
                &["head", "compareAndSet", "scan", "truncate", "listKeys"],
                &[],
            )?,
        })
    }
}

#[async_trait(?Send)]
impl Consensus for JsConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        let v = self.m.call("head", &[key.into()]).await?;
        if v.is_null() || v.is_undefined() {
            return Ok(None);
        }
        versioned(&v)
            .map(Some)
            .map_err(|d| self.m.broken(&self.store, "head", d))
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        validate_compare_and_set(expected, &new)?;
        let next = js_sys::Object::new();
        // Setting properties on a fresh plain object cannot fail.
        let _ = Reflect::set(&next, &"seqno".into(), &seqno_to_js(new.seqno));
        let _ = Reflect::set(&next, &"data".into(), &bytes_to_js(&new.data));
        let expected = expected.map(seqno_to_js).unwrap_or(JsValue::NULL);
        let v = self
            .m
            .call("compareAndSet", &[key.into(), expected, next.into()])
            .await?;
        match v.as_bool() {
            Some(true) => Ok(CaSResult::Committed),
            Some(false) => Ok(CaSResult::ExpectationMismatch),
            // It ran, and says nothing we can read: the write may have happened.
            None => Err(self.m.broken(
                &self.store,
                "compareAndSet",
                format!(
                    "returned {} where true (committed) or false (mismatch) was expected",
                    convert::describe(&v)
                ),
            )),
        }
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        let limit_js = JsValue::from_f64(limit.min(convert::MAX_SAFE_INTEGER as usize) as f64);
        let v = self
            .m
            .call("scan", &[key.into(), seqno_to_js(from), limit_js])
            .await?;
        let bad = |d: String| self.m.broken(&self.store, "scan", d);
        if !Array::is_array(&v) {
            return Err(bad(format!(
                "returned {} where an array of versions was expected",
                convert::describe(&v)
            )));
        }
        let mut out: Vec<VersionedData> = Vec::new();
        for (i, e) in Array::from(&v).iter().enumerate() {
            let vd = versioned(&e).map_err(|d| bad(format!("[{i}] {d}")))?;
            if vd.seqno < from {
                return Err(bad(format!("returned {} below from = {from}", vd.seqno)));
            }
            if out.last().is_some_and(|last| last.seqno >= vd.seqno) {
                return Err(bad(format!("returned {} out of ascending order", vd.seqno)));
            }
            out.push(vd);
        }
        if out.len() > limit {
            return Err(bad(format!(
                "returned {} versions, beyond the limit {limit}",
                out.len()
            )));
        }
        Ok(out)
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        match self.head(key).await? {
            None => {
                return Err(ExternalError::determinate(format!(
                    "truncate {key:?} to {seqno}: the key has no versions"
                )))
            }
            Some(head) if head.seqno < seqno => {
                return Err(ExternalError::determinate(format!(
                    "truncate {key:?} to {seqno}: beyond the head {}",
                    head.seqno
                )))
            }
            Some(_) => {}
        }
        let v = self
            .m
            .call("truncate", &[key.into(), seqno_to_js(seqno)])
            .await?;
        let n = convert::uint64(&v, "count").map_err(|e| {
            self.m.broken(
                &self.store,
                "truncate",
                format!(
                    "returned a bad value: {} (expected how many versions it deleted)",
                    e.message
                ),
            )
        })?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        let v = self.m.call("listKeys", &[]).await?;
        let bad = |d: String| self.m.broken(&self.store, "listKeys", d);
        if !Array::is_array(&v) {
            return Err(bad(format!(
                "returned {} where an array of strings was expected",
                convert::describe(&v)
            )));
        }
        Array::from(&v)
            .iter()
            .enumerate()
            .map(|(i, k)| {
                k.as_string().ok_or_else(|| {
                    bad(format!(
                        "returned {} at [{i}], not a string",
                        convert::describe(&k)
                    ))
                })
            })
            .collect()
    }
}
