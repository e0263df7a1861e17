//! The profile's JSON, with its times and weights written as the decimals
//! they are.
//!
//! In: a value to serialize (a thread, the meta, a counter). Out: its JSON,
//! as `serde_json::to_writer` writes it, but for numbers: a float that is a
//! whole number of microseconds or of nanoseconds in milliseconds (every
//! time, duration and weight the profile holds: the collector rounds
//! on-CPU weights to the microsecond, and the rest are nanoseconds over
//! 1e6) is written from that integer, `4.003`, `76.829008`, the same digits
//! the shortest round-trip form has (a division is correctly rounded, so
//! `k / 1e3` is the double nearest `k` thousandths, the one those digits
//! parse back to). Anything else goes the general way.
//!
//! Why: the general shortest-form search was 4.7 % of a 10-s `record -a`'s
//! CPU beside pgbench (its 400,000 samples' time deltas and weights, the
//! markers' times: `perf record --call-graph dwarf -p`); an integer's digits
//! cost a fraction of it.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};

/// Write `value` as compact JSON to `out`, numbers as the module doc says.
pub(crate) fn to_writer<W: Write, T: Serialize + ?Sized>(
    out: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, DecimalFormatter);
    value.serialize(&mut ser)
}

/// serde_json's compact formatter, floats aside.
struct DecimalFormatter;

impl Formatter for DecimalFormatter {
    fn write_f64<W: ?Sized + Write>(&mut self, out: &mut W, value: f64) -> io::Result<()> {
        let mut buf = [0u8; 32];
        match decimal(value, &mut buf) {
            Some(text) => out.write_all(text),
            None => CompactFormatter.write_f64(out, value),
        }
    }
}

/// Bound on the integer a value is written from: with at most 15 digits, two
/// such decimals never round to one double, so these digits are the
/// shortest that read back (past it a shorter form may exist), and the
/// integer is exact in a double.
const MAX_DIGITS_VALUE: f64 = 1e15;

/// `value`'s digits if it is a whole number of thousandths or millionths
/// (see the module doc), written into `buf`; None otherwise.
fn decimal(value: f64, buf: &mut [u8; 32]) -> Option<&[u8]> {
    if !value.is_finite() {
        return None;
    }
    for (scale, places) in [(1e3, 3usize), (1e6, 6)] {
        let k = (value * scale).round();
        if k.abs() >= MAX_DIGITS_VALUE || k / scale != value {
            continue;
        }
        // Written right to left: fraction digits, the point, the integer.
        let mut n = k.abs() as u64;
        let mut at = buf.len();
        let mut fraction = [0u8; 6];
        for d in fraction[..places].iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        let kept = fraction[..places]
            .iter()
            .rposition(|&d| d != b'0')
            .map_or(0, |i| i + 1);
        if kept == 0 {
            at -= 1;
            buf[at] = b'0';
        } else {
            at -= kept;
            buf[at..at + kept].copy_from_slice(&fraction[..kept]);
        }
        at -= 1;
        buf[at] = b'.';
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if value.is_sign_negative() && k != 0.0 {
            at -= 1;
            buf[at] = b'-';
        }
        return Some(&buf[at..]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that every value the fast path takes is written as serde_json
    /// writes it (the shortest round-trip digits) or, where serde_json
    /// switches to an exponent, as the same number, and that it reads back
    /// as the very same double; and that values it cannot write exactly go
    /// the general way.
    #[test]
    fn decimals_read_back_as_the_same_double() {
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            1.001,
            4.003,
            76.829008,
            0.000001,
            0.05,
            123456.789,
            -2.5,
            8.999e9,
            1.0 / 3.0,
            0.1 + 0.2,
            1e-9,
            9.5e9,
            f64::NAN,
            f64::INFINITY,
            1e300,
        ];
        // Nanoseconds over 1e6 and microseconds over 1e3, as the profile makes them.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push((x % 1_000_000_000_000_000) as f64 / 1e6);
            values.push((x % 1_000_000_000) as f64 / 1e3);
            values.push(f64::from_bits(x) % 1e6);
        }
        let mut fast = 0;
        for v in values {
            let mut ours = Vec::new();
            to_writer(&mut ours, &v).unwrap();
            let general = serde_json::to_string(&v).unwrap();
            let mut buf = [0u8; 32];
            if decimal(v, &mut buf).is_some() {
                fast += 1;
                let text = std::str::from_utf8(&ours).unwrap();
                let back: f64 = text.parse().unwrap();
                if v == 0.0 {
                    assert_eq!(back, 0.0, "{v:e} written {text}");
                } else {
                    assert_eq!(back.to_bits(), v.to_bits(), "{v:e} written {text}");
                }
                if !general.contains('e') && v != 0.0 {
                    assert_eq!(text, general, "{v:e}");
                }
            } else {
                assert_eq!(String::from_utf8(ours).unwrap(), general, "{v:e}");
            }
        }
        assert!(fast > 400_000, "the fast path took {fast}");
    }
}
