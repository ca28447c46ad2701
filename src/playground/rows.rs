//! A shard's rows, as the Shard panel lists them: its contents at its upper. Every update of the
//! trace is at a time before the upper, so the contents at the upper are all of them,
//! consolidated: each row with its count. The rows the newest write changed are marked. Bounded:
//! the first [`ROWS_SHOWN`] rows (the newest first) and how many there are in all.

use serde::Serialize;

use super::versions::ReadUpdate;
use crate::persist::codec::{Codec, Datum, Row};
use crate::persist::state::Schema;
use crate::upsert::types::SourceData;

/// How many rows a shard's view carries.
pub const ROWS_SHOWN: usize = 8;

/// One row of a shard at its upper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowView {
    /// The row as the core prints one, `(3, "hello")` (a string key and value as a row of the
    /// two); an error in a row's place (the upsert shard's) as `error: ...`.
    pub row: String,
    /// How many times the shard holds it: its diffs, summed.
    pub count: i64,
    /// The newest write that changed a row changed this one (an update at its time).
    pub newest: bool,
}

/// The rows of a shard at its upper.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowsView {
    /// The first rows: those the newest write changed, then the others in row order.
    pub shown: Vec<RowView>,
    /// How many rows it holds, shown or not (a row held twice is one row, its count 2).
    pub total: u64,
    /// The upper they are the rows at (a big shard's are listed at most every second, so they
    /// may trail the shard's upper; `None` before the shard has one).
    pub upper: Option<u64>,
}

/// The rows of a trace: each batch's updates, with whether their times are the writes' own (a
/// batch compaction has not advanced to a since). The newest write is the newest of those times.
pub fn shard_rows<'a>(
    schema: Option<&Schema>,
    batches: impl IntoIterator<Item = (&'a [ReadUpdate], bool)>,
) -> RowsView {
    // Each update with its time if the time is the write's own.
    let mut all: Vec<(&ReadUpdate, Option<u64>)> = Vec::new();
    for (updates, own_times) in batches {
        all.extend(updates.iter().map(|u| (u, own_times.then_some(u.2))));
    }
    let newest = all.iter().filter_map(|u| u.1).max();
    fn row<'a>(u: &(&'a ReadUpdate, Option<u64>)) -> (&'a [u8], &'a [u8]) {
        (&u.0 .0, &u.0 .1)
    }
    crate::sort::sort_by(&mut all, |a, b| row(a).cmp(&row(b)));
    // Decoded for their order, said (formatted) only for the rows shown: a shard of thousands of
    // rows is listed on each change of its batches, and formatting every row cost more than the
    // rest (the page's frame bench).
    let mut rows: Vec<(Decoded, i64, bool)> = Vec::new();
    for same in all.chunk_by(|a, b| row(a) == row(b)) {
        let count = same.iter().fold(0i64, |c, u| c.saturating_add(u.0 .3));
        if count != 0 {
            let newest = newest.is_some() && same.iter().any(|u| u.1 == newest);
            rows.push((decode(schema, &same[0].0 .0, &same[0].0 .1), count, newest));
        }
    }
    let total = rows.len() as u64;
    crate::sort::sort_by(&mut rows, |a, b| {
        (!a.2, a.0.order()).cmp(&(!b.2, b.0.order()))
    });
    rows.truncate(ROWS_SHOWN);
    RowsView {
        shown: rows
            .into_iter()
            .map(|(d, count, newest)| RowView {
                row: d.text(),
                count,
                newest,
            })
            .collect(),
        total,
        upper: None,
    }
}

/// A row decoded by the shard's codecs: the row, an error stored in a row's place (the upsert
/// shard's), or bytes that do not decode (how many).
enum Decoded {
    Row(Row),
    Error(Row, String),
    Undecodable(Row, usize),
}

impl Decoded {
    /// The order rows are listed in (an error by its text, bytes that do not decode first).
    fn order(&self) -> &Row {
        match self {
            Decoded::Row(r) | Decoded::Error(r, _) | Decoded::Undecodable(r, _) => r,
        }
    }

    /// As the core prints a row, `(3, "hello")`; `error: ...`; `N bytes that do not decode`.
    fn text(self) -> String {
        match self {
            Decoded::Row(r) => r.to_string(),
            Decoded::Error(_, text) => text,
            Decoded::Undecodable(_, n) => format!("{n} bytes that do not decode"),
        }
    }
}

/// A row decoded by the shard's codecs.
fn decode(schema: Option<&Schema>, k: &[u8], v: &[u8]) -> Decoded {
    let (key, val) = schema.map_or(("", ""), |s| (&*s.key_codec, &*s.val_codec));
    let key = match key {
        "Row" => Row::decode(k).ok(),
        "String" => String::decode(k).ok().map(|s| Row::new([Datum::String(s)])),
        "SourceData.v1" => match SourceData::decode(k) {
            Ok(SourceData(Ok(row))) => Some(row),
            Ok(SourceData(Err(e))) => {
                let text = format!("error: {e}");
                return Decoded::Error(Row::new([Datum::String(text.clone())]), text);
            }
            Err(_) => None,
        },
        _ => None,
    };
    let val = match val {
        "()" if v.is_empty() => Some(None),
        "String" => String::decode(v).ok().map(|s| Some(Datum::String(s))),
        _ => None,
    };
    match (key, val) {
        (Some(mut row), Some(more)) => {
            row.0.extend(more);
            Decoded::Row(row)
        }
        _ => Decoded::Undecodable(Row::default(), k.len() + v.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upsert::types::{kv_row, DataflowError};

    fn schema(key: &str, val: &str) -> Schema {
        Schema {
            key_codec: key.into(),
            val_codec: val.into(),
        }
    }

    fn enc<C: Codec>(c: &C) -> Vec<u8> {
        let mut buf = Vec::new();
        c.encode(&mut buf);
        buf
    }

    fn up(key: i64, value: &str, t: u64, d: i64) -> ReadUpdate {
        (enc(&SourceData(Ok(kv_row(key, value)))), Vec::new(), t, d)
    }

    #[test]
    fn an_upsert_shard_consolidates_to_its_rows_the_newest_first() {
        let s = schema("SourceData.v1", "()");
        // Key 3 was "a", then "hello"; key 1 is held twice; key 2 came and went.
        let old = [up(3, "a", 5, 1), up(1, "x", 5, 2), up(2, "b", 6, 1)];
        let new = [up(3, "a", 9, -1), up(3, "hello", 9, 1), up(2, "b", 7, -1)];
        let v = shard_rows(Some(&s), [(&old[..], true), (&new[..], true)]);
        assert_eq!(v.total, 2);
        let row = |row: &str, count, newest| RowView {
            row: row.into(),
            count,
            newest,
        };
        assert_eq!(
            v.shown,
            [row("(3, \"hello\")", 1, true), row("(1, \"x\")", 2, false)]
        );
        // Times a compaction advanced are not the writes' own: nothing is marked newest by them.
        let v = shard_rows(Some(&s), [(&old[..], false), (&new[..], false)]);
        assert!(v.shown.iter().all(|r| !r.newest));
        assert_eq!(v.shown[0].row, "(1, \"x\")");
    }

    #[test]
    fn strings_errors_and_undecodable_bytes_each_say_what_they_are() {
        let s = schema("String", "String");
        let u = [(b"k0003".to_vec(), b"W1:w1#5".to_vec(), 3, 1)];
        assert_eq!(
            shard_rows(Some(&s), [(&u[..], true)]).shown[0].row,
            "(\"k0003\", \"W1:w1#5\")"
        );
        let e = SourceData(Err(DataflowError::DecodeError("bad".into())));
        let u = [(enc(&e), Vec::new(), 3, 1), (vec![9, 9], Vec::new(), 3, 1)];
        let v = shard_rows(Some(&schema("SourceData.v1", "()")), [(&u[..], true)]);
        let texts: Vec<&str> = v.shown.iter().map(|r| r.row.as_str()).collect();
        assert_eq!(texts, ["2 bytes that do not decode", "error: decode: bad"]);
        // A shard with no schema yet has no codec to read its bytes by.
        let n = enc(&e).len();
        assert_eq!(
            shard_rows(None, [(&u[..1], true)]).shown[0].row,
            format!("{n} bytes that do not decode")
        );
    }

    #[test]
    fn at_most_rows_shown_are_carried_and_all_are_counted() {
        let s = schema("SourceData.v1", "()");
        let u: Vec<ReadUpdate> = (0..20).map(|k| up(k, "v", 1, 1)).collect();
        let v = shard_rows(Some(&s), [(&u[..], true)]);
        assert_eq!((v.shown.len(), v.total), (ROWS_SHOWN, 20));
        assert_eq!(v.shown[0].row, "(0, \"v\")");
    }
}
