//! Unpredictable names for temporary files and private directories (a
//! local user must not guess them). In: the kernel's random source. Out: hex.

/// Sixteen hex digits from the kernel's random source.
pub fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: writing 8 bytes into a local buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr() as *mut libc::c_void, bytes.len(), 0) };
    if n != bytes.len() as isize {
        // Never predictable from the pid alone: mix in the clock.
        let t = super::clock::monotonic_ns() ^ (std::process::id() as u64).rotate_left(32);
        bytes = t.to_ne_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
