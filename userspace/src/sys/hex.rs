//! Bytes as hex text: build ids in profiles, debug-file paths and
//! exporters' labels, random names. In: bytes. Out: lower-case hex, two
//! digits a byte.

/// `bytes` as lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    /// Check that each byte is two lower-case digits, leading zero kept.
    #[test]
    fn two_lower_case_digits_a_byte() {
        assert_eq!(super::hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(super::hex(&[]), "");
    }
}
