//! CRC-32 (the IEEE polynomial, reflected: the checksum of zlib, PNG and `crc32fast`), which
//! frames every encoded state version, rollup and batch part (see [`super::encoding`]).
//!
//! One 256-entry table, built at compile time, one byte per step. The wider tables of
//! slicing-by-16 implementations (16 KiB of data that does not compress) would be the largest
//! single item of the page's `.wasm`; records here are small, so one byte per step is fast
//! enough. The value is exactly `crc32fast::hash`'s (a test checks both over many inputs), so
//! stored records are unchanged.

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

/// The CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
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
        for len in 0..600usize {
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
