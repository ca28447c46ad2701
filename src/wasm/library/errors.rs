//! Errors as JavaScript sees them.
//!
//! Every failure of the library's API reaches JavaScript as an `Error` object (a `TypeError`
//! for a value of the wrong type, a `RangeError` for a number out of range, a plain `Error`
//! otherwise) whose message says what was wrong, with a `code` property naming the kind
//! (the `ErrorCode` TypeScript type) so that callers can branch without parsing messages. Nothing on this path
//! panics: a panic in wasm traps the module and kills every object of the page.

use std::fmt;

use wasm_bindgen::prelude::*;

use crate::oracle::OracleError;
use crate::persist::error::{InvalidUsage, PersistError};
use crate::runtime::Elapsed;
use crate::write_task::WriteTaskError;

#[wasm_bindgen(typescript_custom_section)]
const TS_ERRORS: &'static str = r#"
/**
 * The `code` property of every Error the library throws or rejects with:
 * - `"TypeError"` / `"RangeError"`: a bad argument (the Error is a TypeError / RangeError);
 * - `"Closed"`: the location was closed; `"Expired"`: the handle expired or was consumed;
 * - `"Timeout"`: the call ran past the client's `callTimeoutMs`;
 * - `"SinceViolation"`, `"InvalidBounds"`, `"CodecMismatch"`, `"IndeterminateOutcome"`,
 *   `"Corrupted"`, `"DiffOverflow"`, `"InvalidUsage"`: persist refused the call;
 * - `"Fenced"`, `"Exhausted"`, `"OracleError"`: the timestamp oracle refused the call;
 * - `"WriteTaskError"`: a write task could not make a command durable;
 * - `"Permanent"`: the store holds something that will not heal (bytes that do not decode, a
 *   referenced blob that is gone, a connection closed for good); the message names the shard,
 *   the seqno or key, and what is wrong;
 * - `"Unavailable"`: the storage service cannot be used here (IndexedDB under Node).
 */
export type ErrorCode =
    | "TypeError" | "RangeError" | "Closed" | "Expired" | "Timeout"
    | "SinceViolation" | "InvalidBounds" | "CodecMismatch" | "IndeterminateOutcome"
    | "Corrupted" | "DiffOverflow" | "InvalidUsage"
    | "Fenced" | "Exhausted" | "OracleError" | "WriteTaskError" | "Unavailable" | "Permanent";
/** An Error thrown by the library: a plain `Error`, `TypeError` or `RangeError` with a `code`. */
export interface PersistPlaygroundError extends Error {
    code: ErrorCode;
}
"#;

/// What kind of JS `Error` to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A plain `Error`.
    Error,
    /// A `TypeError`: the value has the wrong type or shape.
    Type,
    /// A `RangeError`: the number is outside the accepted range.
    Range,
}

/// A failure of the library's API, on its way to becoming a JS `Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibError {
    /// Which constructor.
    pub class: ErrorClass,
    /// The `code` property (see the `ErrorCode` TypeScript type).
    pub code: &'static str,
    /// The message.
    pub message: String,
}

/// The result type of every fallible function of the library.
pub type LibResult<T> = Result<T, LibError>;

impl LibError {
    /// A plain `Error` with `code`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        LibError {
            class: ErrorClass::Error,
            code,
            message: message.into(),
        }
    }

    /// A `TypeError`.
    pub fn type_error(message: impl Into<String>) -> Self {
        LibError {
            class: ErrorClass::Type,
            code: "TypeError",
            message: message.into(),
        }
    }

    /// A `RangeError`.
    pub fn range(message: impl Into<String>) -> Self {
        LibError {
            class: ErrorClass::Range,
            code: "RangeError",
            message: message.into(),
        }
    }

    /// The location was closed.
    pub fn closed(what: &str) -> Self {
        LibError::new(
            "Closed",
            format!("{what}: the location is closed; open a new one"),
        )
    }

    /// The handle can no longer be used (expired, or moved into a listen).
    pub fn expired(message: impl Into<String>) -> Self {
        LibError::new("Expired", message)
    }

    /// Builds the JS object.
    pub fn to_js(&self) -> JsValue {
        let err: js_sys::Error = match self.class {
            ErrorClass::Error => js_sys::Error::new(&self.message),
            ErrorClass::Type => js_sys::TypeError::new(&self.message).into(),
            ErrorClass::Range => js_sys::RangeError::new(&self.message).into(),
        };
        // Setting a property on a fresh Error object cannot fail.
        let _ = js_sys::Reflect::set(&err, &"code".into(), &self.code.into());
        err.into()
    }
}

impl fmt::Display for LibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl From<LibError> for JsValue {
    fn from(e: LibError) -> JsValue {
        e.to_js()
    }
}

impl From<InvalidUsage> for LibError {
    fn from(e: InvalidUsage) -> Self {
        let code = match &e {
            InvalidUsage::Expired { .. } => "Expired",
            InvalidUsage::SinceViolation { .. } => "SinceViolation",
            InvalidUsage::InvalidBounds { .. }
            | InvalidUsage::InvalidEmptyTimeInterval { .. }
            | InvalidUsage::InvalidBatchBounds { .. }
            | InvalidUsage::UpdateNotBeyondLower { .. }
            | InvalidUsage::UpdateBeyondUpper { .. } => "InvalidBounds",
            InvalidUsage::CodecMismatch { .. } => "CodecMismatch",
            InvalidUsage::IndeterminateOutcome { .. } => "IndeterminateOutcome",
            InvalidUsage::Corrupted(_) => "Corrupted",
            InvalidUsage::DiffOverflow(_) => "DiffOverflow",
            _ => "InvalidUsage",
        };
        LibError::new(code, e.to_string())
    }
}

impl From<PersistError> for LibError {
    fn from(e: PersistError) -> Self {
        match e {
            PersistError::InvalidUsage(u) => u.into(),
            PersistError::Permanent(p) => p.into(),
        }
    }
}

impl From<crate::location::PermanentError> for LibError {
    fn from(e: crate::location::PermanentError) -> Self {
        LibError::new("Permanent", e.to_string())
    }
}

impl From<OracleError> for LibError {
    fn from(e: OracleError) -> Self {
        let code = match &e {
            OracleError::Fenced { .. } => "Fenced",
            OracleError::Exhausted { .. } => "Exhausted",
            _ => "OracleError",
        };
        LibError::new(code, e.to_string())
    }
}

impl From<WriteTaskError> for LibError {
    fn from(e: WriteTaskError) -> Self {
        LibError::new("WriteTaskError", e.to_string())
    }
}

impl From<Elapsed> for LibError {
    fn from(e: Elapsed) -> Self {
        LibError::new(
            "Timeout",
            format!("the call did not finish in time: {e} (the client's callTimeoutMs)"),
        )
    }
}
