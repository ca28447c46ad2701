//! CRC-32 (the IEEE polynomial, reflected: the checksum of zlib, PNG and `crc32fast`), which
//! frames every encoded state version, rollup and batch part (see `encoding.rs`).
//!
//! Slicing-by-8: eight bytes per step through eight 256-entry tables. Only the first table is
//! built at compile time; the other seven (7 KiB, which would be the largest single item of the
//! page's `.wasm` if they were data) are derived from it once, at the first use. Checksums were
//! a fifth of a small compare_and_append's time one byte per step (every state version and
//! rollup is framed). The value is exactly `crc32fast::hash`'s (a test checks both over many
//! inputs), so stored records are unchanged.

/// The reflected IEEE polynomial.
const POLY: u32 = 0xEDB8_8320;

/// `TABLE[b]`: the CRC register after shifting byte `b` through eight rounds.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// `TABLES[k][b]`: the CRC register after shifting byte `b` followed by `k` zero bytes.
fn tables() -> &'static [[u32; 256]; 8] {
    static TABLES: std::sync::OnceLock<Box<[[u32; 256]; 8]>> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut t = Box::new([[0u32; 256]; 8]);
        t[0] = TABLE;
        for k in 1..8 {
            for b in 0..256 {
                let prev = t[k - 1][b];
                t[k][b] = TABLE[(prev & 0xFF) as usize] ^ (prev >> 8);
            }
        }
        t
    })
}

/// The CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    // Short records (most state versions' fields) are not worth the tables.
    let split = if bytes.len() >= 64 {
        bytes.len() / 8 * 8
    } else {
        0
    };
    let (words, rest) = bytes.split_at(split);
    if !words.is_empty() {
        let t = tables();
        for c in words.chunks_exact(8) {
            let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            crc = t[7][(lo & 0xFF) as usize]
                ^ t[6][((lo >> 8) & 0xFF) as usize]
                ^ t[5][((lo >> 16) & 0xFF) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][usize::from(c[4])]
                ^ t[2][usize::from(c[5])]
                ^ t[1][usize::from(c[6])]
                ^ t[0][usize::from(c[7])];
        }
    }
    for &b in rest {
        crc = TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn known_values() {
        assert_eq!(crc32(b""), 0);
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn equals_crc32fast_on_every_length_and_many_contents() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..1200usize {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            assert_eq!(crc32(&bytes), crc32fast::hash(&bytes), "length {len}");
        }
    }
}
