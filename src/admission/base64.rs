//! Standard base64 (RFC 4648 §4, padded) of the patch, written straight into the response.
//!
//! The `base64` crate's general-purpose engine takes about seven instructions per input byte;
//! this one reads eight bytes at a time, looks up two digits at a time in a 4,096-entry table
//! of digit pairs and writes eight digits per six input bytes. The tests compare it with the
//! crate on every length up to 200 and on every pair of digits.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The two digits of every 12-bit value, first digit in the low byte.
static PAIRS: [u16; 4096] = pairs();

const fn pairs() -> [u16; 4096] {
    let mut table = [0; 4096];
    let mut i = 0;
    while i < 4096 {
        table[i] = ALPHABET[i >> 6] as u16 | (ALPHABET[i & 63] as u16) << 8;
        i += 1;
    }
    table
}

/// The four digits of the 24-bit group at bits 40..64 of `n`, first digit in the low byte.
fn quad(n: u64) -> u64 {
    u64::from(PAIRS[(n >> 52) as usize]) | u64::from(PAIRS[(n >> 40) as usize & 0xfff]) << 16
}

/// The encoded length of `n` bytes.
pub(super) fn encoded_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Appends the encoding of `input` to `out`.
pub(super) fn encode_into(input: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + encoded_len(input.len()), 0);
    let dst = &mut out[start..];
    // Six bytes at a time, read as eight (the two past them are ignored), while eight remain.
    let steps = input.len().saturating_sub(2) / 6;
    for (i, dst) in dst[..steps * 8].chunks_exact_mut(8).enumerate() {
        let window: [u8; 8] = input[i * 6..i * 6 + 8].try_into().unwrap_or_default();
        let n = u64::from_be_bytes(window);
        dst.copy_from_slice(&(quad(n) | quad(n << 24) << 32).to_le_bytes());
    }
    // At most seven bytes left: whole groups of three, then one or two padded.
    let rest = &input[steps * 6..];
    for (src, dst) in rest.chunks(3).zip(dst[steps * 8..].chunks_exact_mut(4)) {
        let mut group = [0; 8];
        group[..src.len()].copy_from_slice(src);
        let digits = quad(u64::from_be_bytes(group)).to_le_bytes();
        let kept = src.len() + 1;
        dst[..kept].copy_from_slice(&digits[..kept]);
        dst[kept..].fill(b'=');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::base64::Engine as _;
    use ::base64::engine::general_purpose::STANDARD;

    fn encode(input: &[u8]) -> String {
        let mut out = b"prefix:".to_vec();
        encode_into(input, &mut out);
        let text = String::from_utf8(out).unwrap();
        text.strip_prefix("prefix:").unwrap().to_owned()
    }

    #[test]
    fn every_length_encodes_as_the_base64_crate_does() {
        // Bytes that cover every value, in an order with no period of 3 or 6.
        let bytes: Vec<u8> = (0u32..200).map(|i| (i * 97 + i / 7) as u8).collect();
        for n in 0..=bytes.len() {
            let input = &bytes[..n];
            assert_eq!(encode(input), STANDARD.encode(input), "length {n}");
            assert_eq!(encode(input).len(), encoded_len(n));
        }
        assert_eq!(encode(b""), "");
        assert_eq!(encode(b"f"), "Zg==");
        assert_eq!(encode(b"fo"), "Zm8=");
        assert_eq!(encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(encode(b"foobarx"), "Zm9vYmFyeA==");
    }

    #[test]
    fn every_pair_of_digits_encodes_as_the_base64_crate_does() {
        // Every 12-bit value in both halves of a group, in both groups of the six-byte step.
        let mut input = Vec::new();
        for n in 0u32..8192 {
            let v = n / 2;
            let group = v << 12 | (4095 - v);
            input.extend_from_slice(&group.to_be_bytes()[1..]);
        }
        assert_eq!(encode(&input), STANDARD.encode(&input));
        // And in the tail, whole and padded.
        for n in [0u32, 1, 0xfff, 0x1000, 0xabcdef, 0xffffff] {
            let tail = [0xff, 0xee, 0xdd, (n >> 16) as u8, (n >> 8) as u8, n as u8];
            for from in 0..tail.len() {
                assert_eq!(encode(&tail[from..]), STANDARD.encode(&tail[from..]));
                assert_eq!(encode(&tail[..from]), STANDARD.encode(&tail[..from]));
            }
        }
    }
}
