//! Names the kernel bounds, held inline: a task's `comm` (16 bytes with its
//! NUL) and a block device's name (`DISK_NAME_LEN`, 32).
//!
//! In: the kernel's bytes or a string read back. Out: `Copy` values that
//! records carry without a heap allocation each: beside pgbench the waker's
//! name and the device were ~250,000 allocations in 6 s of records
//! (heaptrack), made and freed again as each wait and request went from
//! the ring to the profile.

use arrayvec::ArrayString;

/// A task's name, as the kernel keeps it (`TASK_COMM_LEN` less the NUL).
pub type TaskName = ArrayString<15>;

/// A block device's name (`vda`, `nvme0n1`, `dm-0`; `DISK_NAME_LEN` is 32).
pub type DeviceName = ArrayString<32>;

/// `text` cut to what fits `N` bytes, at a character's boundary: a longer
/// name (read back from a file someone wrote) is cut, never refused.
pub fn short_name<const N: usize>(text: &str) -> ArrayString<N> {
    let mut end = text.len().min(N);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    ArrayString::from(&text[..end]).expect("cut to fit")
}

/// A NUL-terminated name from the kernel, invalid UTF-8 replaced.
pub fn task_name(comm: &[u8]) -> TaskName {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    match std::str::from_utf8(&comm[..len]) {
        Ok(text) => short_name(text),
        Err(_) => short_name(&String::from_utf8_lossy(&comm[..len])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_at_a_character_not_refused() {
        assert_eq!(task_name(b"pgbench\0\0\0").as_str(), "pgbench");
        assert_eq!(task_name(b"0123456789abcdef").as_str(), "0123456789abcde");
        // A two-byte character across the limit is dropped whole.
        let cut: TaskName = short_name("01234567890123é");
        assert_eq!(cut.as_str(), "01234567890123");
        assert_eq!(task_name(b"a\xffb\0").as_str(), "a\u{fffd}b");
        let long: DeviceName = short_name(&"d".repeat(40));
        assert_eq!(long.len(), 32);
    }
}
