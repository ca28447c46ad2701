//! Where the library's clients draw their ids from (writer and leased reader ids, idempotency
//! tokens, part keys, maintenance work).
//!
//! Invariant: two processes (tabs, workers, page visits, Node processes) over one durable or
//! shared location never draw the same id. The rule:
//! - over an in-memory location **with a `seed`**, ids come from the seeded generator, so a run
//!   is a function of its seed and its calls (the same events every time);
//! - everywhere else (IndexedDB, a location JavaScript supplies, an in-memory location without
//!   a seed), ids come from the platform's CSPRNG, `crypto.getRandomValues` (browsers, workers
//!   and Node 20+ all have it), whatever the seed.
//!
//! A seeded id over IndexedDB would be the same on every visit: the second visit's first write
//! would carry the first visit's writer id and idempotency token, and persist would take it for
//! a replay of a write that committed with another upper (a permanent error). Drawing from the
//! CSPRNG is what makes the README's `new PersistClient(await PersistLocation.indexedDb(..),
//! { seed: 7 })` commit on every visit and in every tab.

use std::cell::RefCell;
use std::rc::Rc;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use wasm_bindgen::prelude::*;

use super::errors::{LibError, LibResult};
use crate::persist::Entropy;

#[wasm_bindgen]
extern "C" {
    /// `crypto.getRandomValues(array)`: the platform's CSPRNG.
    #[wasm_bindgen(catch, js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(array: &js_sys::Uint8Array) -> Result<JsValue, JsValue>;
}

/// Fills `buf` from `crypto.getRandomValues` (through a JS-owned array, never a view of the
/// wasm memory, which some engines refuse).
fn fill_from_crypto(buf: &mut [u8]) -> Result<(), JsValue> {
    for chunk in buf.chunks_mut(65_536) {
        let array = js_sys::Uint8Array::new_with_length(chunk.len() as u32);
        get_random_values(&array)?;
        array.copy_to(chunk);
    }
    Ok(())
}

/// An [`Entropy`] on `crypto.getRandomValues`, or an `"Unavailable"` error if this platform has
/// none. Should a later call fail (no engine does for 12 bytes), the ids come from a generator
/// seeded with 256 bits the CSPRNG gave when this was made: still unique per process.
pub fn csprng() -> LibResult<Entropy> {
    let mut seed = [0u8; 32];
    fill_from_crypto(&mut seed).map_err(|e| {
        LibError::new(
            "Unavailable",
            format!(
                "crypto.getRandomValues is not available ({}): ids over a durable location must \
                 be unique per process",
                e.dyn_ref::<js_sys::Error>()
                    .map(|e| String::from(e.message()))
                    .unwrap_or_else(|| super::convert::describe(&e))
            ),
        )
    })?;
    let fallback = RefCell::new(Xoshiro256PlusPlus::from_seed(seed));
    Ok(Rc::new(move |buf: &mut [u8]| {
        if fill_from_crypto(buf).is_err() {
            fallback.borrow_mut().fill_bytes(buf);
        }
    }))
}

/// The entropy a client over a location of `kind` needs: `None` (the seeded generator) only for
/// an in-memory location given a seed. See the module docs.
pub fn for_location(kind: &str, seeded: bool) -> LibResult<Option<Entropy>> {
    if kind == "memory" && seeded {
        Ok(None)
    } else {
        csprng().map(Some)
    }
}
