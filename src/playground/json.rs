//! Plain data to compact JSON text: the one serde `Serializer` of what the page reads
//! (snapshots, events, applied commands, stamped commands) and of [`super::Snapshot::digest`].
//!
//! The facade (`src/wasm.rs`) hands the text to `JSON.parse`: one string crosses the boundary per
//! call instead of one JavaScript call per field, and every type's `Serialize` is instantiated for
//! this serializer alone (no second copy for a digest encoding, none for serde-wasm-bindgen).
//!
//! The output is what `serde_json` writes for the same value, and what the page read before:
//! structs and maps are objects (map keys that are numbers become strings), sequences and tuples
//! arrays, `None` and `()` `null`, enums externally tagged unless their serde attributes say
//! otherwise. Departures, none of which the page can tell: a whole float is written without
//! `.0` and never with an exponent (Rust's `Display`), a float that is not finite is `null`, and
//! bytes are an array of numbers (our types have none). Serializing never panics in release
//! builds; the only error is a custom one a `Serialize` impl raises. Debug builds assert that no
//! integer beyond [`MAX_EXACT`] reaches the text (JavaScript would round it).

use std::fmt::{self, Display, Write as _};

use serde::ser::{self, Serialize};

/// The largest integer a JavaScript number holds exactly, and every smaller one: 2^53. Debug
/// builds (every test) check that no integer beyond it, positive or negative, is written: such
/// a value (a seed, a hash) must be serialized as a string, as the snapshot's seeds are.
pub const MAX_EXACT: u64 = 1 << 53;

/// Why a value did not serialize (a `Serialize` impl refused it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(pub String);

impl Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonError {}

impl ser::Error for JsonError {
    fn custom<T: Display>(msg: T) -> Self {
        JsonError(msg.to_string())
    }
}

/// `value` as compact JSON text.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    let mut w = Writer(String::with_capacity(256));
    value.serialize(&mut w)?;
    Ok(w.0)
}

/// `s` as a JSON string literal, appended to `out`.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// `n` in decimal, appended to `out` (no formatting machinery: this runs for every number).
fn push_u64(out: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &buf[i..] {
        out.push(d as char);
    }
}

fn push_i64(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_u64(out, n.unsigned_abs());
}

fn push_f64(out: &mut String, v: f64) {
    if v.is_finite() {
        // Display writes the shortest text that reads back as `v`, never with an exponent.
        let _ = write!(out, "{v}");
    } else {
        out.push_str("null");
    }
}

struct Writer(String);

/// A struct, map, sequence or variant under way: `close` ends it.
pub struct Compound<'a> {
    w: &'a mut Writer,
    first: bool,
    close: &'static str,
}

impl Writer {
    fn open(&mut self, open: &str, close: &'static str) -> Compound<'_> {
        self.0.push_str(open);
        Compound {
            w: self,
            first: true,
            close,
        }
    }

    /// `{"variant":` then the caller's value, then `close`.
    fn variant(&mut self, variant: &str, open: &str, close: &'static str) -> Compound<'_> {
        self.0.push('{');
        push_str(&mut self.0, variant);
        self.0.push(':');
        self.open(open, close)
    }
}

impl Compound<'_> {
    fn comma(&mut self) {
        if !self.first {
            self.w.0.push(',');
        }
        self.first = false;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        self.comma();
        value.serialize(&mut *self.w)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), JsonError> {
        self.comma();
        push_str(&mut self.w.0, key);
        self.w.0.push(':');
        value.serialize(&mut *self.w)
    }

    fn end(self) -> Result<(), JsonError> {
        self.w.0.push_str(self.close);
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Writer {
    type Ok = ();
    type Error = JsonError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), JsonError> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), JsonError> {
        debug_assert!(
            v.unsigned_abs() <= MAX_EXACT,
            "{v} reaches JSON as a number beyond 2^53, which JavaScript rounds"
        );
        push_i64(&mut self.0, v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), JsonError> {
        debug_assert!(
            v <= MAX_EXACT,
            "{v} reaches JSON as a number beyond 2^53, which JavaScript rounds"
        );
        push_u64(&mut self.0, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), JsonError> {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), JsonError> {
        push_f64(&mut self.0, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), JsonError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), JsonError> {
        push_str(&mut self.0, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), JsonError> {
        let mut seq = self.open("[", "]");
        for b in v {
            seq.element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), JsonError> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), JsonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), JsonError> {
        self.0.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), JsonError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), JsonError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        let c = self.variant(variant, "", "}");
        value.serialize(&mut *c.w)?;
        c.end()
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, JsonError> {
        Ok(self.open("[", "]"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Compound<'a>, JsonError> {
        Ok(self.open("[", "]"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, JsonError> {
        Ok(self.open("[", "]"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, JsonError> {
        Ok(self.variant(variant, "[", "]}"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a>, JsonError> {
        Ok(self.open("{", "}"))
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Compound<'a>, JsonError> {
        Ok(self.open("{", "}"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, JsonError> {
        Ok(self.variant(variant, "{", "}}"))
    }
}

/// The sequence-like parts (elements in order) and the struct-like parts (named fields).
macro_rules! compound {
    ($($part:ident :: $method:ident),* ; $($named:ident),*) => {
        $(impl ser::$part for Compound<'_> {
            type Ok = ();
            type Error = JsonError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
                self.element(value)
            }
            fn end(self) -> Result<(), JsonError> {
                Compound::end(self)
            }
        })*
        $(impl ser::$named for Compound<'_> {
            type Ok = ();
            type Error = JsonError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), JsonError> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), JsonError> {
                Compound::end(self)
            }
        })*
    };
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field;
    SerializeStruct,
    SerializeStructVariant
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), JsonError> {
        self.comma();
        // A key that is not a string (a number, say) is written, then quoted.
        let at = self.w.0.len();
        key.serialize(&mut *self.w)?;
        if !self.w.0[at..].starts_with('"') {
            self.w.0.insert(at, '"');
            self.w.0.push('"');
        }
        self.w.0.push(':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        value.serialize(&mut *self.w)
    }
    fn end(self) -> Result<(), JsonError> {
        Compound::end(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        at_ms: u64,
        delta: i64,
        rate: f64,
        text: String,
        none: Option<u8>,
        list: Vec<(u32, bool)>,
        map: BTreeMap<u64, char>,
        unit: Kind,
        newtype: Kind,
        tagged: Tagged,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    enum Kind {
        Plain,
        #[allow(dead_code)]
        Wrapped(u8),
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "camelCase")]
    enum Tagged {
        One { n: u8 },
    }

    fn sample() -> Sample {
        Sample {
            at_ms: MAX_EXACT,
            delta: -(MAX_EXACT as i64),
            rate: 0.25,
            text: "a \"q\" \\ \n\u{1}é".into(),
            none: None,
            list: vec![(0, true), (7, false)],
            map: [(3, 'x'), (10, 'y')].into_iter().collect(),
            unit: Kind::Plain,
            newtype: Kind::Wrapped(9),
            tagged: Tagged::One { n: 1 },
        }
    }

    #[test]
    fn it_writes_what_serde_json_writes() {
        let ours = to_json(&sample()).unwrap();
        assert_eq!(ours, serde_json::to_string(&sample()).unwrap());
        assert!(ours.contains(r#""map":{"3":"x","10":"y"}"#), "{ours}");
        assert!(ours.contains(r#""newtype":{"wrapped":9}"#), "{ours}");
    }

    #[test]
    fn numbers_at_their_limits_and_odd_floats() {
        assert_eq!(to_json(&0u64).unwrap(), "0");
        assert_eq!(to_json(&-1i32).unwrap(), "-1");
        assert_eq!(to_json(&1.0f64).unwrap(), "1");
        assert_eq!(to_json(&1e-7f64).unwrap(), "0.0000001");
        assert_eq!(to_json(&f64::NAN).unwrap(), "null");
        assert_eq!(to_json(&f64::INFINITY).unwrap(), "null");
        for f in [0.1, 1e300, -2.5e-300, 123456.789] {
            let back: f64 = serde_json::from_str(&to_json(&f).unwrap()).unwrap();
            assert_eq!(back, f);
        }
    }

    #[test]
    fn a_refusing_impl_is_an_error() {
        struct No;
        impl Serialize for No {
            fn serialize<S: ser::Serializer>(&self, _s: S) -> Result<S::Ok, S::Error> {
                Err(ser::Error::custom("no"))
            }
        }
        assert_eq!(to_json(&vec![No]), Err(JsonError("no".into())));
    }

    #[test]
    fn the_digit_writers_reach_the_type_limits() {
        let mut out = String::new();
        push_u64(&mut out, u64::MAX);
        out.push(' ');
        push_i64(&mut out, i64::MIN);
        assert_eq!(out, format!("{} {}", u64::MAX, i64::MIN));
    }

    #[test]
    fn integers_up_to_two_to_the_53_are_written_exactly() {
        assert_eq!(to_json(&MAX_EXACT).unwrap(), "9007199254740992");
        assert_eq!(to_json(&-(MAX_EXACT as i64)).unwrap(), "-9007199254740992");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "beyond 2^53")]
    fn a_u64_beyond_two_to_the_53_is_caught_in_debug_builds() {
        let _ = to_json(&(MAX_EXACT + 1));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "beyond 2^53")]
    fn an_i64_beyond_two_to_the_53_is_caught_in_debug_builds() {
        let _ = to_json(&[i64::MIN]);
    }
}
