//! How the IndexedDB location writes seqnos into keys: pure, so it is tested natively.
//!
//! IndexedDB compares strings by code unit and numbers as doubles (exact only to 2^53). A seqno is
//! therefore written as exactly [`SEQNO_DIGITS`] zero-padded decimal digits, so that key order is
//! numeric order over the whole `u64` range and every key parses back to the seqno it came from.

use super::SeqNo;

/// The width of a seqno in a key: enough for `u64::MAX`.
pub const SEQNO_DIGITS: usize = 20;

/// The key text of `seqno`.
pub fn seqno_key(seqno: SeqNo) -> String {
    format!("{:0width$}", seqno.0, width = SEQNO_DIGITS)
}

/// The seqno of key text made by [`seqno_key`]; `None` for anything else.
pub fn parse_seqno_key(s: &str) -> Option<SeqNo> {
    if s.len() != SEQNO_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok().map(SeqNo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqno_keys_sort_numerically_and_round_trip() {
        let seqnos = [
            0,
            1,
            9,
            10,
            99,
            100,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX as u64,
            u64::MAX,
        ];
        let keys: Vec<String> = seqnos.iter().map(|s| seqno_key(SeqNo(*s))).collect();
        let mut sorted = keys.clone();
        crate::sort::sort(&mut sorted);
        assert_eq!(keys, sorted, "string order is numeric order");
        for (s, k) in seqnos.iter().zip(&keys) {
            assert_eq!(parse_seqno_key(k), Some(SeqNo(*s)));
        }
        assert_eq!(parse_seqno_key("12"), None, "too short");
        assert_eq!(parse_seqno_key("0000000000000000000x"), None, "not digits");
        assert_eq!(parse_seqno_key("99999999999999999999"), None, "beyond u64");
        assert_eq!(parse_seqno_key("+0000000000000000001"), None, "a sign");
    }
}
