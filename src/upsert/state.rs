//! The upsert state: per key, the value the output shard holds, kept so that a new value for a
//! key can retract the old one.
//!
//! A cell ([`StateValue`]) is in one of two modes:
//! - **Consolidating**: updates from the persist input are folded in without knowing their
//!   order: `diff_sum += d`, `len_sum += len(b) * d`, `checksum_sum += seahash(b) * d` (all
//!   wrapping), and `value_xor ^= b` when `|d|` is odd, where `b` is the value's encoding. A
//!   well-formed upsert collection has, per key and time, at most one `(current, +1)` plus pairs
//!   `(previous, +1), (previous, -1)` that cancel in the XOR and in the sums whatever their order,
//!   so once every update of a time is in, the cell holds exactly the current value.
//! - **Value**: decoded, by [`StateValue::ensure_decoded`]: a finalized value, a tombstone, or a
//!   provisional value written by a partial drain (the finalized value is kept beside it).
//!
//! `ensure_decoded` accepts `diff_sum == 1` (the bytes `value_xor[..len_sum]` must decode and match
//! the checksum, and the rest of `value_xor` must be zero) and `diff_sum == 0` (every accumulator
//! must be zero: a tombstone). Anything else is a [`StateError`], which the operator reports on
//! its health stream before stopping: where the original panics ("invalid upsert state"), this
//! never panics.
//!
//! Order keys `O` (the operator uses `Option<FromTime>`) say which of two updates for a key at one
//! time is newer. Decoded values carry `O::default()` (for `Option`, `None`: below every source
//! update), so only provisional values, written at a time with the order of the update that wrote
//! them, make later updates at that time with a lower order lose.

use std::num::Wrapping;

use serde::{Deserialize, Serialize};

pub use super::error::StateError;
use super::error::ValueDecodeError;
use super::types::{UpsertError, UpsertKey, UpsertValue};
use crate::persist::codec::{Codec, Diff, Row};

/// Encodes a value for the consolidating accumulators: tag `0` and the row's encoding, or tag `1`
/// and the bincode encoding of the error. Canonical: equal values have equal bytes.
pub fn encode_value(value: &UpsertValue, buf: &mut Vec<u8>) {
    match value {
        Ok(row) => {
            buf.push(0);
            row.encode(buf);
        }
        Err(e) => {
            buf.push(1);
            bincode::serialize_into(&mut *buf, e).expect("bincode into a Vec");
        }
    }
}

/// Decodes what [`encode_value`] wrote.
pub fn decode_value(bytes: &[u8]) -> Result<UpsertValue, ValueDecodeError> {
    match bytes.split_first() {
        Some((0, rest)) => Row::decode(rest)
            .map(Ok)
            .map_err(|e| ValueDecodeError::Row(e.to_string())),
        Some((1, rest)) => bincode::deserialize::<UpsertError>(rest)
            .map(Err)
            .map_err(|e| ValueDecodeError::Error(e.to_string())),
        Some((tag, _)) => Err(ValueDecodeError::UnknownTag(*tag)),
        None => Err(ValueDecodeError::Empty),
    }
}

/// The accumulators of a consolidating cell. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consolidating {
    /// XOR of the encodings of every update with an odd diff.
    #[serde(with = "serde_bytes")]
    pub value_xor: Vec<u8>,
    /// Sum of `len(encoding) * diff`.
    pub len_sum: Wrapping<i64>,
    /// Sum of `seahash(encoding) * diff`.
    pub checksum_sum: Wrapping<i64>,
    /// Sum of diffs.
    pub diff_sum: Wrapping<i64>,
}

impl Consolidating {
    /// Folds one update (already encoded) in.
    fn merge_encoded(&mut self, bytes: &[u8], diff: Diff) {
        let len = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        self.diff_sum += diff;
        self.len_sum += len.wrapping_mul(diff);
        // Reinterpreting the hash as i64 is fine: it is only a checksum.
        self.checksum_sum += (seahash::hash(bytes) as i64).wrapping_mul(diff);
        if diff.rem_euclid(2) == 1 {
            if self.value_xor.len() < bytes.len() {
                self.value_xor.resize(bytes.len(), 0);
            }
            for (acc, b) in self.value_xor.iter_mut().zip(bytes) {
                *acc ^= b;
            }
        }
    }

    /// Whether every accumulator is zero (the key is absent and the cell may be removed).
    pub fn is_zero(&self) -> bool {
        self.diff_sum.0 == 0
            && self.len_sum.0 == 0
            && self.checksum_sum.0 == 0
            && self.value_xor.iter().all(|&b| b == 0)
    }

    /// What these accumulators decode to: `Some(value)` for one value, `None` for nothing.
    pub fn decode(&self, key: &UpsertKey) -> Result<Option<UpsertValue>, StateError> {
        let invalid = |reason: String| StateError::InvalidState {
            key: key.short(),
            reason,
        };
        match self.diff_sum.0 {
            1 => {
                let len = usize::try_from(self.len_sum.0)
                    .map_err(|_| invalid(format!("len_sum {} is negative", self.len_sum.0)))?;
                let bytes = self.value_xor.get(..len).ok_or_else(|| {
                    invalid(format!(
                        "len_sum {len} exceeds the {} accumulated bytes",
                        self.value_xor.len()
                    ))
                })?;
                if self.value_xor[len..].iter().any(|&b| b != 0) {
                    return Err(invalid("bytes beyond len_sum are not zero".into()));
                }
                if seahash::hash(bytes) as i64 != self.checksum_sum.0 {
                    return Err(invalid("checksum_sum does not match the value".into()));
                }
                decode_value(bytes)
                    .map(Some)
                    .map_err(|e| invalid(format!("value does not decode: {e}")))
            }
            0 => {
                if !self.is_zero() {
                    return Err(invalid(
                        "diff_sum is 0 but the other accumulators are not".into(),
                    ));
                }
                Ok(None)
            }
            other => Err(invalid(format!("diff_sum is {other}, not 0 or 1"))),
        }
    }
}

/// A decoded cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value<T, O> {
    /// A value the output shard holds.
    FinalizedValue(UpsertValue, O),
    /// The key is absent.
    Tombstone(O),
    /// A value written by a partial drain at `provisional_value.1`, valid only for later drains
    /// at that same time; feedback overwrites it.
    ProvisionalValue {
        /// The value the output shard holds, kept for reads at other times.
        finalized_value: Option<Box<(UpsertValue, O)>>,
        /// `(value or None for a provisional tombstone, time, order)`.
        provisional_value: (Option<UpsertValue>, T, O),
    },
}

/// One cell of the state. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateValue<T, O> {
    /// Accumulating feedback updates.
    Consolidating(Consolidating),
    /// Decoded.
    Value(Value<T, O>),
}

impl<T, O> Default for StateValue<T, O> {
    fn default() -> Self {
        StateValue::Consolidating(Consolidating::default())
    }
}

fn not_decoded(key: Option<&UpsertKey>) -> StateError {
    StateError::NotDecoded {
        key: key.map_or_else(|| "?".to_string(), |k| k.short()),
    }
}

impl<T: Eq + Clone, O: Default + Clone> StateValue<T, O> {
    /// A finalized value.
    pub fn finalized_value(value: UpsertValue, order: O) -> Self {
        StateValue::Value(Value::FinalizedValue(value, order))
    }

    /// A tombstone.
    pub fn tombstone(order: O) -> Self {
        StateValue::Value(Value::Tombstone(order))
    }

    /// Whether this is a (finalized) tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, StateValue::Value(Value::Tombstone(_)))
    }

    /// Whether this holds a provisional value (or provisional tombstone).
    pub fn is_provisional(&self) -> bool {
        matches!(self, StateValue::Value(Value::ProvisionalValue { .. }))
    }

    /// A provisional value at `ts` with no finalized value beside it.
    pub fn new_provisional_value(value: UpsertValue, ts: T, order: O) -> Self {
        StateValue::Value(Value::ProvisionalValue {
            finalized_value: None,
            provisional_value: (Some(value), ts, order),
        })
    }

    /// A provisional tombstone at `ts` with no finalized value beside it.
    pub fn new_provisional_tombstone(ts: T, order: O) -> Self {
        StateValue::Value(Value::ProvisionalValue {
            finalized_value: None,
            provisional_value: (None, ts, order),
        })
    }

    /// This cell with a provisional `value` (or tombstone, for `None`) at `ts`, keeping the
    /// finalized value. The cell must be decoded.
    pub fn into_provisional(
        self,
        value: Option<UpsertValue>,
        ts: T,
        order: O,
    ) -> Result<Self, StateError> {
        let finalized_value = match self {
            StateValue::Value(Value::FinalizedValue(v, o)) => Some(Box::new((v, o))),
            StateValue::Value(Value::Tombstone(_)) => None,
            StateValue::Value(Value::ProvisionalValue {
                finalized_value, ..
            }) => finalized_value,
            StateValue::Consolidating(_) => return Err(not_decoded(None)),
        };
        Ok(StateValue::Value(Value::ProvisionalValue {
            finalized_value,
            provisional_value: (value, ts, order),
        }))
    }

    /// The order of the provisional value at `ts`, else of the finalized value (`None` for a
    /// provisional cell without one). The cell must be decoded.
    pub fn provisional_order(&self, ts: &T) -> Result<Option<&O>, StateError> {
        match self {
            StateValue::Value(Value::FinalizedValue(_, o)) => Ok(Some(o)),
            StateValue::Value(Value::Tombstone(o)) => Ok(Some(o)),
            StateValue::Value(Value::ProvisionalValue {
                provisional_value: (_, pts, po),
                ..
            }) if pts == ts => Ok(Some(po)),
            StateValue::Value(Value::ProvisionalValue {
                finalized_value, ..
            }) => Ok(finalized_value.as_ref().map(|b| &b.1)),
            StateValue::Consolidating(_) => Err(not_decoded(None)),
        }
    }

    /// The value to retract for an update at `ts`: the provisional value at `ts`, else the
    /// finalized value; `None` if there is neither. The cell must be decoded.
    pub fn provisional_value_ref(&self, ts: &T) -> Result<Option<&UpsertValue>, StateError> {
        match self {
            StateValue::Value(Value::FinalizedValue(v, _)) => Ok(Some(v)),
            StateValue::Value(Value::Tombstone(_)) => Ok(None),
            StateValue::Value(Value::ProvisionalValue {
                provisional_value: (pv, pts, _),
                ..
            }) if pts == ts => Ok(pv.as_ref()),
            StateValue::Value(Value::ProvisionalValue {
                finalized_value, ..
            }) => Ok(finalized_value.as_ref().map(|b| &b.0)),
            StateValue::Consolidating(_) => Err(not_decoded(None)),
        }
    }

    /// The finalized value, if any (a decoded cell), dropping any provisional value.
    fn into_finalized_value(self) -> Option<UpsertValue> {
        match self {
            StateValue::Value(Value::FinalizedValue(v, _)) => Some(v),
            StateValue::Value(Value::Tombstone(_)) => None,
            StateValue::Value(Value::ProvisionalValue {
                finalized_value, ..
            }) => finalized_value.map(|b| b.0),
            StateValue::Consolidating(_) => None,
        }
    }

    /// Folds one feedback update in. A decoded cell first turns back into a consolidating one
    /// seeded with its *finalized* value only (a provisional value is overwritten by feedback).
    /// Returns whether the cell is now all zeros (the key is absent; the cell may be deleted).
    pub fn merge_update(&mut self, value: &UpsertValue, diff: Diff, buf: &mut Vec<u8>) -> bool {
        if let StateValue::Value(_) = self {
            let finalized = std::mem::take(self).into_finalized_value();
            if let Some(v) = finalized {
                self.merge_update(&v, 1, buf);
            }
        }
        let StateValue::Consolidating(c) = self else {
            unreachable!("turned into Consolidating above")
        };
        buf.clear();
        encode_value(value, buf);
        c.merge_encoded(buf, diff);
        c.is_zero()
    }

    /// Decodes a consolidating cell in place: a finalized value with the default order, or a
    /// tombstone. A decoded cell is left as it is. See the module docs for what is accepted.
    pub fn ensure_decoded(&mut self, key: &UpsertKey) -> Result<(), StateError> {
        if let StateValue::Consolidating(c) = self {
            *self = match c.decode(key)? {
                Some(v) => StateValue::Value(Value::FinalizedValue(v, O::default())),
                None => StateValue::Value(Value::Tombstone(O::default())),
            };
        }
        Ok(())
    }

    /// Whether this cell decodes (without changing it), with the error if not.
    pub fn check_decodes(&self, key: &UpsertKey) -> Result<(), StateError> {
        match self {
            StateValue::Consolidating(c) => c.decode(key).map(|_| ()),
            StateValue::Value(_) => Ok(()),
        }
    }

    /// A rough size in bytes, for statistics.
    pub fn memory_size(&self) -> u64 {
        let base = std::mem::size_of::<Self>() as u64;
        let row = |v: &UpsertValue| match v {
            Ok(r) => r.0.len() as u64 * 32,
            Err(_) => 64,
        };
        base + match self {
            StateValue::Consolidating(c) => c.value_xor.len() as u64,
            StateValue::Value(Value::FinalizedValue(v, _)) => row(v),
            StateValue::Value(Value::Tombstone(_)) => 0,
            StateValue::Value(Value::ProvisionalValue {
                finalized_value,
                provisional_value,
            }) => {
                finalized_value.as_ref().map_or(0, |b| row(&b.0) + 32)
                    + provisional_value.0.as_ref().map_or(0, row)
            }
        }
    }
}

/// What `multi_get` returns per key: the cell, if there is one, and its metadata.
#[derive(Debug, Clone)]
pub struct UpsertValueAndSize<T, O> {
    /// The cell, if the key has one.
    pub value: Option<StateValue<T, O>>,
    /// Its size and tombstone flag as stored, if the key has a cell.
    pub metadata: Option<ValueMetadata>,
}

impl<T, O> Default for UpsertValueAndSize<T, O> {
    fn default() -> Self {
        UpsertValueAndSize {
            value: None,
            metadata: None,
        }
    }
}

/// The size of a stored cell and whether it is a tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueMetadata {
    /// Its size in bytes, as the backend measures it.
    pub size: u64,
    /// Whether it is a tombstone.
    pub is_tombstone: bool,
}

/// A write for `multi_put`: the new cell (`None` deletes the key), with the metadata a previous
/// `multi_get` returned for the old one.
#[derive(Debug, Clone)]
pub struct PutValue<V> {
    /// The new cell, or `None` to delete the key.
    pub value: Option<V>,
    /// The old cell's metadata, if it had one.
    pub previous_value_metadata: Option<ValueMetadata>,
}

/// Statistics of one `multi_put`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PutStats {
    /// Puts and deletes processed.
    pub processed_puts: u64,
    /// Change in the number of non-tombstone cells.
    pub values_diff: i64,
    /// Change in the number of tombstones.
    pub tombstones_diff: i64,
    /// Change in the total size.
    pub size_diff: i64,
    /// New keys.
    pub inserts: u64,
    /// Replaced cells.
    pub updates: u64,
    /// Deleted keys.
    pub deletes: u64,
}

impl PutStats {
    /// Accounts for one put of `new` over a cell described by `previous`.
    pub fn adjust<T: Eq + Clone, O: Default + Clone>(
        &mut self,
        new: Option<&StateValue<T, O>>,
        new_size: Option<u64>,
        previous: &Option<ValueMetadata>,
    ) {
        self.processed_puts += 1;
        let size = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        if let Some(p) = previous {
            self.size_diff -= size(p.size);
        }
        if let Some(n) = new_size {
            self.size_diff += size(n);
        }
        let new_value = new.is_some_and(|v| !v.is_tombstone());
        let old_value = previous.is_some_and(|p| !p.is_tombstone);
        self.values_diff += i64::from(new_value) - i64::from(old_value);
        let new_tomb = new.is_some_and(|v| v.is_tombstone());
        let old_tomb = previous.is_some_and(|p| p.is_tombstone);
        self.tombstones_diff += i64::from(new_tomb) - i64::from(old_tomb);
        match (new.is_some(), previous.is_some()) {
            (true, false) => self.inserts += 1,
            (true, true) => self.updates += 1,
            (false, true) => self.deletes += 1,
            (false, false) => {}
        }
    }
}

/// Statistics of one `multi_get`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GetStats {
    /// Keys asked for.
    pub processed_gets: u64,
    /// Bytes returned.
    pub processed_gets_size: u64,
    /// Keys that had a cell.
    pub returned_gets: u64,
}

/// A blind map from keys to cells behind the upsert state. Implementations need not understand
/// cells; they must report accurate statistics.
///
/// Contract: `multi_get` fills `results_out[i]` with the cell of `gets[i]` (keys are unique;
/// the two iterators have the same length); `multi_put` stores or deletes each key, the last put
/// of a repeated key winning. `cells` lists every stored cell in key order (for observation).
pub trait UpsertStateBackend<T, O> {
    /// Stores (or, for `None`, deletes) each key's cell.
    fn multi_put<P>(&mut self, puts: P) -> Result<PutStats, StateError>
    where
        P: IntoIterator<Item = (UpsertKey, PutValue<StateValue<T, O>>)>;

    /// Reads each key's cell into the matching slot of `results_out`.
    fn multi_get<'r, G, R>(&mut self, gets: G, results_out: R) -> Result<GetStats, StateError>
    where
        G: IntoIterator<Item = UpsertKey>,
        R: IntoIterator<Item = &'r mut UpsertValueAndSize<T, O>>,
        T: 'r,
        O: 'r;

    /// Every stored cell, in key order.
    fn cells(&self) -> Vec<(UpsertKey, &StateValue<T, O>)>;

    /// The number of stored cells.
    fn len(&self) -> usize;

    /// Whether no cell is stored.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
