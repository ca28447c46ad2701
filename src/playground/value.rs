//! Plain data as it arrives from the page or a file: a small JSON value ([`Value`]), and typed
//! reads of it whose errors say what serde's would (`missing field `actor``, `invalid type:
//! string "abc", expected u32`, `unknown field `bogus`, expected one of ...`).
//!
//! Commands are decoded from a `Value` by hand (the `decode` module, which builds on this one) rather than by serde's derive:
//! an internally tagged enum's derived `Deserialize` buffers every field in serde's generic
//! `Content` and instantiates a visitor per variant and per field type, about a tenth of the
//! page's code. The facade builds a `Value` from the JS object directly (`src/wasm.rs`); any serde
//! `Deserializer` (serde_json in the tests, for tours and exported runs) builds one through
//! [`Value`]'s `Deserialize`.
//!
//! Numbers keep what they were: a whole number that fits is [`Value::UInt`] (or [`Value::Int`]
//! when negative), anything else [`Value::Float`], so `1.5` for a count is refused as serde
//! refuses it. Object keys are unique (a repeated key is refused when the value is built).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value. See the module docs.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null` (or `undefined`, from JS).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number from 0 to `u64::MAX`.
    UInt(u64),
    /// A negative whole number from `i64::MIN`.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, its keys in order, each once.
    Object(Vec<(String, Value)>),
}

/// Why a value is not what was asked for: a message in serde's words and the field it is in
/// (outermost first, `spec.ratePerS`; empty for the value itself). It prints as the message,
/// then ` in field `spec.ratePerS``, so the words serde would use come first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    message: String,
    field: Vec<String>,
}

impl DecodeError {
    /// An error about the value itself.
    pub fn new(message: impl Into<String>) -> DecodeError {
        DecodeError {
            message: message.into(),
            field: Vec::new(),
        }
    }

    /// The same error, inside the field `name` of an object.
    #[inline(never)]
    pub fn in_field(mut self, name: &str) -> DecodeError {
        self.field.insert(0, name.to_string());
        self
    }

    /// The path of the field it is in (`spec.ratePerS`), empty for the value itself.
    pub fn field(&self) -> String {
        self.field.join(".")
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if !self.field.is_empty() {
            write!(f, " in field `{}`", self.field())?;
        }
        Ok(())
    }
}

impl std::error::Error for DecodeError {}

/// `` `a` ``, `` `a` or `b` ``, or `` one of `a`, `b`, `c` ``, as serde lists what it expected.
pub fn expected_one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        0 => "nothing".into(),
        1 => quoted[0].clone(),
        2 => format!("{} or {}", quoted[0], quoted[1]),
        _ => format!("one of {}", quoted.join(", ")),
    }
}

/// The error for a key given twice.
pub fn duplicate(key: &str) -> DecodeError {
    DecodeError::new(format!("duplicate field `{key}`"))
}

impl Value {
    /// A number from a JS number (an `f64`): whole ones in range are integers.
    pub fn number(n: f64) -> Value {
        if n.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&n) {
            Value::UInt(n as u64)
        } else if n.fract() == 0.0 && (-9_223_372_036_854_775_808.0..0.0).contains(&n) {
            Value::Int(n as i64)
        } else {
            Value::Float(n)
        }
    }

    /// `invalid type: <what this is>, expected <expected>`.
    pub fn invalid(&self, expected: &str) -> DecodeError {
        let got = match self {
            Value::Null => "null".to_string(),
            Value::Bool(b) => format!("boolean `{b}`"),
            Value::UInt(n) => format!("integer `{n}`"),
            Value::Int(n) => format!("integer `{n}`"),
            Value::Float(f) => format!("floating point `{f:?}`"),
            Value::Str(s) => format!("string {s:?}"),
            Value::Array(_) => "sequence".to_string(),
            Value::Object(_) => "map".to_string(),
        };
        DecodeError::new(format!("invalid type: {got}, expected {expected}"))
    }

    /// The object's entries.
    pub fn entries(&self, expected: &str) -> Result<&[(String, Value)], DecodeError> {
        match self {
            Value::Object(entries) => Ok(entries),
            other => Err(other.invalid(expected)),
        }
    }

    /// The array's items.
    pub fn items(&self, expected: &str) -> Result<&[Value], DecodeError> {
        match self {
            Value::Array(items) => Ok(items),
            other => Err(other.invalid(expected)),
        }
    }

    /// A string.
    pub fn string(&self) -> Result<String, DecodeError> {
        self.str_as("a string").map(str::to_string)
    }

    /// A string, where serde would expect `expected` (`variant identifier`, say).
    pub fn str_as(&self, expected: &str) -> Result<&str, DecodeError> {
        match self {
            Value::Str(s) => Ok(s),
            other => Err(other.invalid(expected)),
        }
    }

    /// A string or null.
    pub fn opt_string(&self) -> Result<Option<String>, DecodeError> {
        match self {
            Value::Null => Ok(None),
            other => other.string().map(Some),
        }
    }

    /// A boolean.
    pub fn bool(&self) -> Result<bool, DecodeError> {
        match self {
            Value::Bool(b) => Ok(*b),
            other => Err(other.invalid("a boolean")),
        }
    }

    /// A whole number from `lo` to `hi` (`ty`: its Rust type, for the message).
    fn whole(&self, lo: i128, hi: i128, ty: &str) -> Result<i128, DecodeError> {
        let n = match self {
            Value::UInt(n) => i128::from(*n),
            Value::Int(n) => i128::from(*n),
            other => return Err(other.invalid(ty)),
        };
        if (lo..=hi).contains(&n) {
            Ok(n)
        } else {
            Err(DecodeError::new(format!(
                "invalid value: integer `{n}`, expected {ty}"
            )))
        }
    }

    /// A `u32`.
    pub fn u32(&self) -> Result<u32, DecodeError> {
        self.whole(0, i128::from(u32::MAX), "u32").map(|n| n as u32)
    }

    /// A `u64`.
    pub fn u64(&self) -> Result<u64, DecodeError> {
        self.whole(0, i128::from(u64::MAX), "u64").map(|n| n as u64)
    }

    /// An `i64`.
    pub fn i64(&self) -> Result<i64, DecodeError> {
        self.whole(i128::from(i64::MIN), i128::from(i64::MAX), "i64")
            .map(|n| n as i64)
    }

    /// An `f64` (a whole number too).
    pub fn f64(&self) -> Result<f64, DecodeError> {
        match self {
            Value::UInt(n) => Ok(*n as f64),
            Value::Int(n) => Ok(*n as f64),
            Value::Float(f) => Ok(*f),
            other => Err(other.invalid("f64")),
        }
    }
}

/// The value of `key` in `entries`, if present.
pub fn get<'a>(entries: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The value of `key` in `entries`, which must be present.
pub fn need<'a>(entries: &'a [(String, Value)], key: &str) -> Result<&'a Value, DecodeError> {
    get(entries, key).ok_or_else(|| DecodeError::new(format!("missing field `{key}`")))
}

/// `read` of the value of `key` in `entries`, which must be present; its errors name the field.
pub fn field<T>(
    entries: &[(String, Value)],
    key: &str,
    read: fn(&Value) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    // A `fn`, not a closure type: one copy per `T` in the page's wasm, not one per call site.
    read(need(entries, key)?).map_err(|e| e.in_field(key))
}

/// `read` of the value of `key` in `entries` if present, `None` if not; its errors name the
/// field.
pub fn field_opt<T>(
    entries: &[(String, Value)],
    key: &str,
    read: fn(&Value) -> Result<Option<T>, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    get(entries, key)
        .map_or(Ok(None), read)
        .map_err(|e| e.in_field(key))
}

/// An object's tag: the variant name at `key` (`type`, `kind`, `op`).
pub fn tag<'a>(entries: &'a [(String, Value)], key: &str) -> Result<&'a str, DecodeError> {
    let tag = need(entries, key)?;
    tag.str_as("variant identifier")
        .map_err(|e| e.in_field(key))
}

/// `unknown variant `x`, expected ...`.
pub fn unknown_variant(name: &str, variants: &[&str]) -> DecodeError {
    DecodeError::new(format!(
        "unknown variant `{name}`, expected {}",
        expected_one_of(variants)
    ))
}

/// `unknown field `x`, expected ...`.
pub fn unknown_field(name: &str, fields: &[&str]) -> DecodeError {
    DecodeError::new(format!(
        "unknown field `{name}`, expected {}",
        expected_one_of(fields)
    ))
}

/// `T` from any serde `Deserializer`, through a [`Value`] and `decode`.
pub fn deserialize_via<'de, D, T>(
    d: D,
    decode: fn(&Value) -> Result<T, DecodeError>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let value = Value::deserialize(d)?;
    decode(&value).map_err(de::Error::custom)
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(if v < 0 {
            Value::Int(v)
        } else {
            Value::UInt(v as u64)
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::UInt(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if get(&entries, &key).is_some() {
                return Err(de::Error::custom(duplicate(&key)));
            }
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(Value::Object(entries))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(v("5"), Value::UInt(5));
        assert_eq!(v("-5"), Value::Int(-5));
        assert_eq!(v("1.5"), Value::Float(1.5));
        assert_eq!(Value::number(5.0), Value::UInt(5));
        assert_eq!(Value::number(-5.0), Value::Int(-5));
        assert_eq!(Value::number(1.5), Value::Float(1.5));
        assert_eq!(Value::number(1e20), Value::Float(1e20));
        assert_eq!(
            Value::number(f64::NAN).u32().unwrap_err().to_string(),
            "invalid type: floating point `NaN`, expected u32"
        );
    }

    #[test]
    fn typed_reads_say_what_serde_says() {
        assert_eq!(
            v(r#""abc""#).u32().unwrap_err().to_string(),
            r#"invalid type: string "abc", expected u32"#
        );
        assert_eq!(
            v("-1").u32().unwrap_err().to_string(),
            "invalid value: integer `-1`, expected u32"
        );
        assert_eq!(
            v("5000000000").u32().unwrap_err().to_string(),
            "invalid value: integer `5000000000`, expected u32"
        );
        assert_eq!(
            v("1e20").i64().unwrap_err().to_string(),
            "invalid type: floating point `1e20`, expected i64"
        );
        assert_eq!(
            v("null").u64().unwrap_err().to_string(),
            "invalid type: null, expected u64"
        );
        assert_eq!(
            v("1").bool().unwrap_err().to_string(),
            "invalid type: integer `1`, expected a boolean"
        );
        assert_eq!(
            v("[]").string().unwrap_err().to_string(),
            "invalid type: sequence, expected a string"
        );
        assert_eq!(
            v("{}").f64().unwrap_err().to_string(),
            "invalid type: map, expected f64"
        );
        assert_eq!(v("3").f64(), Ok(3.0));
        assert_eq!(v("null").opt_string(), Ok(None));
        assert_eq!(expected_one_of(&["a", "b"]), "`a` or `b`");
        assert_eq!(expected_one_of(&["a", "b", "c"]), "one of `a`, `b`, `c`");
    }

    #[test]
    fn a_repeated_key_is_refused() {
        let err = serde_json::from_str::<Value>(r#"{"a":1,"a":2}"#).unwrap_err();
        assert!(err.to_string().starts_with("duplicate field `a`"), "{err}");
    }
}
