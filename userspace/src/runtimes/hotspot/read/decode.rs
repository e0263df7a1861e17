//! HotSpot's encodings decoded, reading no memory: its compressed
//! numbers (UNSIGNED5), its compressed line number tables, and method
//! descriptors written as Java writes them.
//!
//! In: bytes read from a JVM (a line table, a scopes stream) and a
//! method's class, name and signature symbols. Out: numbers, (bytecode
//! index, line) pairs, and a method's name as the JVM's perf map writes it
//! (`long Hot.hotOne(int)`). What is cut short or malformed gives what was
//! read before, or the bytes as they are, never a panic.

/// One number of HotSpot's `CompressedReadStream` (UNSIGNED5, JDK 8-20):
/// bytes below 192 end it, each byte past the first weighs 64 times more,
/// five bytes at most. None where the bytes end first.
pub(super) fn read_unsigned5(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut sum = 0u32;
    let mut shift = 0u32;
    for i in 0..5 {
        let v = *b.get(*at)? as u32;
        *at += 1;
        sum = sum.wrapping_add(v << shift);
        if v < 192 || i == 4 {
            break;
        }
        shift += 6;
    }
    Some(sum)
}

/// HotSpot's compressed line number table (`CompressedLineNumberReadStream`):
/// a byte `bci_delta << 3 | line_delta` (line_delta < 8), or 0xFF and two
/// signed deltas in UNSIGNED5, until a 0 byte. A table cut short or
/// malformed keeps the pairs read before.
pub fn decode_line_table(b: &[u8]) -> Vec<(u32, u32)> {
    let mut at = 0usize;
    let signed = |v: u32| ((v >> 1) as i32) ^ -((v & 1) as i32);
    let (mut bci, mut line) = (0i64, 0i64);
    let mut out = Vec::new();
    while let Some(&first) = b.get(at) {
        at += 1;
        match first {
            0 => break,
            0xff => {
                let Some(db) = read_unsigned5(b, &mut at) else {
                    break;
                };
                let Some(dl) = read_unsigned5(b, &mut at) else {
                    break;
                };
                bci += signed(db) as i64;
                line += signed(dl) as i64;
            }
            v => {
                bci += (v >> 3) as i64;
                line += (v & 7) as i64;
            }
        }
        if !(0..=u32::MAX as i64).contains(&bci)
            || !(0..=u32::MAX as i64).contains(&line)
            || out.len() >= 1 << 16
        {
            break;
        }
        out.push((bci as u32, line as u32));
    }
    out
}

/// `java/lang/String` as Java writes it: `java.lang.String`.
fn class_name(internal: &[u8]) -> String {
    String::from_utf8_lossy(internal).replace('/', ".")
}

/// One type of a descriptor from `d[at..]`, as Java writes it, and where the next begins.
fn descriptor_type(d: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut dims = 0;
    while d.get(at) == Some(&b'[') {
        dims += 1;
        at += 1;
    }
    let (base, next) = match *d.get(at)? {
        b'B' => ("byte".to_string(), at + 1),
        b'C' => ("char".to_string(), at + 1),
        b'D' => ("double".to_string(), at + 1),
        b'F' => ("float".to_string(), at + 1),
        b'I' => ("int".to_string(), at + 1),
        b'J' => ("long".to_string(), at + 1),
        b'S' => ("short".to_string(), at + 1),
        b'Z' => ("boolean".to_string(), at + 1),
        b'V' => ("void".to_string(), at + 1),
        b'L' => {
            let end = at + d[at..].iter().position(|&c| c == b';')?;
            (class_name(&d[at + 1..end]), end + 1)
        }
        _ => return None,
    };
    Some((format!("{base}{}", "[]".repeat(dims)), next))
}

/// A method's name as `Method::external_name` writes it (and so the JVM's
/// perf map): `long Hot.hotOne(int)`. A signature that is no descriptor is
/// written as it is.
pub fn external_name(class: &[u8], name: &[u8], signature: &[u8]) -> String {
    let (class, name) = (class_name(class), String::from_utf8_lossy(name));
    let parsed = (|| {
        let mut at = 1;
        if signature.first() != Some(&b'(') {
            return None;
        }
        let mut params = Vec::new();
        while *signature.get(at)? != b')' {
            let (t, next) = descriptor_type(signature, at)?;
            params.push(t);
            at = next;
        }
        let (ret, end) = descriptor_type(signature, at + 1)?;
        (end == signature.len()).then(|| format!("{ret} {class}.{name}({})", params.join(", ")))
    })();
    parsed.unwrap_or_else(|| format!("{class}.{name}{}", String::from_utf8_lossy(signature)))
}
