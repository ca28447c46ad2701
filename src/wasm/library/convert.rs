//! Checked conversions between JavaScript values and the core's types.
//!
//! Numbers follow one rule: a quantity whose range fits a JS `number` exactly is a plain number,
//! one whose range does not is a `bigint`, and the TypeScript declarations say which.
//! - **Times** (milliseconds, `T = u64` in the core) are plain numbers: integers in
//!   `[0, Number.MAX_SAFE_INTEGER]`. Anything else (a string, a fraction, a negative number,
//!   `NaN`, a `bigint`) is refused with a `TypeError` or `RangeError` naming the argument. A time
//!   the core computes beyond `MAX_SAFE_INTEGER` is reported as a `RangeError`, never rounded.
//! - **Frontiers** of these totally ordered times are one number, or `null` for the empty
//!   frontier (the shard is finished).
//! - **Diffs** (`i64`) and integers inside rows (`i64`) accept a safe-integer `number` or any
//!   `bigint` in range, and come back as `bigint`. **Seqnos** (`u64`) come back as `bigint`.
//!   **Seeds** accept a safe-integer `number` or a `bigint` in `[0, 2^64)`.
//! - **Options objects** must be plain objects (or `undefined`), and an unknown key is a
//!   `TypeError`: a misspelt option fails loudly instead of being ignored.

use std::future::Future;

use futures::future::LocalBoxFuture;
use js_sys::Promise;
use serde::Serialize;
use timely::progress::Antichain;
use tsify::Tsify;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::{LibError, LibResult};
use crate::persist::codec::{Datum, Row, Timestamp};

/// Runs `fut` as a JS `Promise` (see `wasm_bindgen_futures::future_to_promise`). Every async
/// method goes through here with its future boxed, so the promise machinery is compiled once
/// for the whole API rather than once per method (a size measure; the behaviour is the same).
pub fn promise(fut: impl Future<Output = Result<JsValue, JsValue>> + 'static) -> Promise {
    boxed_promise(Box::pin(fut))
}

#[inline(never)]
fn boxed_promise(fut: LocalBoxFuture<'static, Result<JsValue, JsValue>>) -> Promise {
    wasm_bindgen_futures::future_to_promise(fut)
}

/// `Number.MAX_SAFE_INTEGER`: the largest integer a JS number holds exactly, with its neighbours.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A short description of a JS value's type (and the value, for primitives) for messages.
pub fn describe(v: &JsValue) -> String {
    if v.is_undefined() {
        "undefined".into()
    } else if v.is_null() {
        "null".into()
    } else if let Some(s) = v.as_string() {
        let mut shown: String = s.chars().take(40).collect();
        if shown.len() < s.len() {
            shown.push('…');
        }
        format!("a string ({shown:?})")
    } else if let Some(n) = v.as_f64() {
        format!("a number ({})", js_number(n))
    } else if let Some(b) = v.as_bool() {
        format!("a boolean ({b})")
    } else if v.is_bigint() {
        format!("a bigint ({}n)", bigint_text(v))
    } else if v.is_function() {
        "a function".into()
    } else if js_sys::Array::is_array(v) {
        "an array".into()
    } else if v.is_symbol() {
        "a symbol".into()
    } else {
        "an object".into()
    }
}

fn js_number(n: f64) -> String {
    if n.is_nan() {
        "NaN".into()
    } else if n.is_infinite() {
        if n > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{n}")
    }
}

fn bigint_text(v: &JsValue) -> String {
    v.dyn_ref::<js_sys::BigInt>()
        .and_then(|b| b.to_string(10).ok())
        .map(String::from)
        .unwrap_or_default()
}

/// A time: an integer number of milliseconds in `[0, MAX_SAFE_INTEGER]`.
pub fn time(v: &JsValue, what: &str) -> LibResult<Timestamp> {
    let Some(n) = v.as_f64() else {
        return Err(LibError::type_error(format!(
            "{what} must be a number (a time in milliseconds), got {}",
            describe(v)
        )));
    };
    safe_integer(n, what, 0.0).map(|n| n as u64)
}

/// An integer-valued, finite number in `[min, MAX_SAFE_INTEGER]`.
fn safe_integer(n: f64, what: &str, min: f64) -> LibResult<f64> {
    if !n.is_finite() || n.fract() != 0.0 {
        return Err(LibError::range(format!(
            "{what} must be an integer, got {}",
            js_number(n)
        )));
    }
    if n < min || n > MAX_SAFE_INTEGER as f64 {
        return Err(LibError::range(format!(
            "{what} must be between {min} and Number.MAX_SAFE_INTEGER, got {}",
            js_number(n)
        )));
    }
    Ok(n)
}

/// A time or `null` (the empty frontier) when `allow_empty`, as a frontier.
pub fn frontier(v: &JsValue, what: &str, allow_empty: bool) -> LibResult<Antichain<Timestamp>> {
    if v.is_null() && allow_empty {
        return Ok(Antichain::new());
    }
    if v.as_f64().is_none() {
        let expected = if allow_empty {
            "a number (a time) or null (the empty frontier)"
        } else {
            "a number (a time)"
        };
        return Err(LibError::type_error(format!(
            "{what} must be {expected}, got {}",
            describe(v)
        )));
    }
    time(v, what).map(Antichain::from_elem)
}

/// A signed 64-bit integer: a safe-integer number or a bigint in `[-2^63, 2^63)`.
pub fn int64(v: &JsValue, what: &str) -> LibResult<i64> {
    if let Some(n) = v.as_f64() {
        if !n.is_finite() || n.fract() != 0.0 {
            return Err(LibError::range(format!(
                "{what} must be an integer, got {}",
                js_number(n)
            )));
        }
        if n.abs() > MAX_SAFE_INTEGER as f64 {
            return Err(LibError::range(format!(
                "{what} is {}, beyond the safe integers: pass a bigint for values past 2^53",
                js_number(n)
            )));
        }
        return Ok(n as i64);
    }
    if v.is_bigint() {
        return bigint_text(v).parse::<i64>().map_err(|_| {
            LibError::range(format!(
                "{what} must fit a signed 64-bit integer, got {}n",
                bigint_text(v)
            ))
        });
    }
    Err(LibError::type_error(format!(
        "{what} must be a number or a bigint, got {}",
        describe(v)
    )))
}

/// An unsigned 64-bit integer: a safe-integer number or a bigint in `[0, 2^64)`.
pub fn uint64(v: &JsValue, what: &str) -> LibResult<u64> {
    if let Some(n) = v.as_f64() {
        return safe_integer(n, what, 0.0).map(|n| n as u64);
    }
    if v.is_bigint() {
        return bigint_text(v).parse::<u64>().map_err(|_| {
            LibError::range(format!(
                "{what} must fit an unsigned 64-bit integer, got {}n",
                bigint_text(v)
            ))
        });
    }
    Err(LibError::type_error(format!(
        "{what} must be a number or a bigint, got {}",
        describe(v)
    )))
}

/// A probability: a number in `[0, 1]`.
pub fn probability(v: &JsValue, what: &str) -> LibResult<f64> {
    let Some(p) = v.as_f64() else {
        return Err(LibError::type_error(format!(
            "{what} must be a number between 0 and 1, got {}",
            describe(v)
        )));
    };
    if !(0.0..=1.0).contains(&p) {
        return Err(LibError::range(format!(
            "{what} must be between 0 and 1, got {}",
            js_number(p)
        )));
    }
    Ok(p)
}

/// A string.
pub fn string(v: &JsValue, what: &str) -> LibResult<String> {
    v.as_string().ok_or_else(|| {
        LibError::type_error(format!("{what} must be a string, got {}", describe(v)))
    })
}

/// A boolean.
pub fn boolean(v: &JsValue, what: &str) -> LibResult<bool> {
    v.as_bool().ok_or_else(|| {
        LibError::type_error(format!("{what} must be a boolean, got {}", describe(v)))
    })
}

/// An array's elements.
pub fn array(v: &JsValue, what: &str) -> LibResult<Vec<JsValue>> {
    if !js_sys::Array::is_array(v) {
        return Err(LibError::type_error(format!(
            "{what} must be an array, got {}",
            describe(v)
        )));
    }
    Ok(js_sys::Array::from(v).iter().collect())
}

/// A plain options object (or `undefined`) whose keys are all in `allowed`.
pub struct Options {
    obj: Option<js_sys::Object>,
    what: String,
}

impl Options {
    /// Checks `v`: `undefined`, or an object (not an array, not null) with only `allowed` keys.
    pub fn new(v: &JsValue, what: &str, allowed: &[&str]) -> LibResult<Options> {
        Self::shape(v, what, allowed, true)
    }

    /// Like [`Options::new`], but the object is required.
    pub fn required(v: &JsValue, what: &str, allowed: &[&str]) -> LibResult<Options> {
        Self::shape(v, what, allowed, false)
    }

    fn shape(v: &JsValue, what: &str, allowed: &[&str], optional: bool) -> LibResult<Options> {
        if v.is_undefined() && optional {
            return Ok(Options {
                obj: None,
                what: what.to_string(),
            });
        }
        if !v.is_object() || v.is_function() || js_sys::Array::is_array(v) {
            return Err(LibError::type_error(format!(
                "{what} must be an object, got {}",
                describe(v)
            )));
        }
        let obj: js_sys::Object = v.clone().unchecked_into();
        for key in js_sys::Object::keys(&obj).iter() {
            let key = key.as_string().unwrap_or_default();
            if !allowed.contains(&key.as_str()) {
                return Err(LibError::type_error(format!(
                    "{what} has an unknown property {key:?} (expected one of: {})",
                    allowed.join(", ")
                )));
            }
        }
        Ok(Options {
            obj: Some(obj),
            what: what.to_string(),
        })
    }

    /// The value of `key`, if present and not `undefined`.
    pub fn get(&self, key: &str) -> Option<JsValue> {
        let obj = self.obj.as_ref()?;
        let v = js_sys::Reflect::get(obj, &key.into()).ok()?;
        (!v.is_undefined()).then_some(v)
    }

    /// The name of property `key`, for messages (`options.key`).
    pub fn name(&self, key: &str) -> String {
        format!("{}.{key}", self.what)
    }

    /// Property `key` parsed by `parse`, or `default` if absent.
    pub fn parse_or<T>(
        &self,
        key: &str,
        default: T,
        parse: impl FnOnce(&JsValue, &str) -> LibResult<T>,
    ) -> LibResult<T> {
        match self.get(key) {
            Some(v) => parse(&v, &self.name(key)),
            None => Ok(default),
        }
    }

    /// Property `key` parsed by `parse`; absent is a `TypeError`.
    pub fn parse_required<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&JsValue, &str) -> LibResult<T>,
    ) -> LibResult<T> {
        match self.get(key) {
            Some(v) => parse(&v, &self.name(key)),
            None => Err(LibError::type_error(format!(
                "{} is required",
                self.name(key)
            ))),
        }
    }
}

/// One datum of a row: `null`, a boolean, an integer (safe `number` or `bigint`) or a string.
pub fn datum(v: &JsValue, what: &str) -> LibResult<Datum> {
    if v.is_null() {
        Ok(Datum::Null)
    } else if let Some(b) = v.as_bool() {
        Ok(Datum::Bool(b))
    } else if let Some(s) = v.as_string() {
        Ok(Datum::String(s))
    } else if v.as_f64().is_some() || v.is_bigint() {
        int64(v, what).map(Datum::Int)
    } else {
        Err(LibError::type_error(format!(
            "{what} must be null, a boolean, an integer or a string, got {}",
            describe(v)
        )))
    }
}

/// A row: an array of datums.
pub fn row(v: &JsValue, what: &str) -> LibResult<Row> {
    let items = array(v, what)?;
    let datums = items
        .iter()
        .enumerate()
        .map(|(i, d)| datum(d, &format!("{what}[{i}]")))
        .collect::<LibResult<Vec<_>>>()?;
    Ok(Row(datums))
}

/// A row as JS values: numbers become bigints (the `Datum` type says so).
pub fn row_to_js(row: &Row) -> JsValue {
    let out = js_sys::Array::new();
    for d in &row.0 {
        out.push(&match d {
            Datum::Null => JsValue::NULL,
            Datum::Bool(b) => JsValue::from_bool(*b),
            Datum::Int(i) => js_sys::BigInt::from(*i).into(),
            Datum::String(s) => JsValue::from_str(s),
        });
    }
    out.into()
}

/// A time the core computed, as a JS number; beyond `MAX_SAFE_INTEGER` is a `RangeError`.
pub fn ms(t: u64, what: &str) -> LibResult<f64> {
    if t > MAX_SAFE_INTEGER {
        return Err(LibError::range(format!(
            "{what} is {t}, beyond Number.MAX_SAFE_INTEGER: it cannot be returned as a number"
        )));
    }
    Ok(t as f64)
}

/// A frontier as `number | null`.
pub fn frontier_out(f: &Antichain<Timestamp>, what: &str) -> LibResult<Option<f64>> {
    f.elements().first().map(|t| ms(*t, what)).transpose()
}

/// An optional time as `number | null`.
pub fn opt_ms(t: Option<u64>, what: &str) -> LibResult<Option<f64>> {
    t.map(|t| ms(t, what)).transpose()
}

/// A plain data value as JS, through its tsify declaration (so value and type agree).
pub fn to_js<T: Tsify + Serialize>(value: &T) -> LibResult<JsValue> {
    value
        .into_js()
        .map(Into::into)
        .map_err(|e| LibError::new("InvalidUsage", format!("cannot convert a result: {e}")))
}
