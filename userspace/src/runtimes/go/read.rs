//! A goroutine's pprof labels read from its process's memory: the
//! `map[string]string` (Go 1.18 to 1.23's `runtime.hmap`) or, from Go 1.24,
//! the list sorted by key (`labelMap{Set{List []Label}}`) the kernel found
//! the goroutine pointing at, read once per map and hash seed (list and
//! fingerprint) with `process_vm_readv`.
//!
//! In: a pid, the map's address and the hash seed the kernel read with it
//! (a list's: the fingerprint it made, [`list_fingerprint`]).
//! Out: the labels, sorted by key, as the name of a root frame
//! ([`labels_frame`]), or why they could not be read. The memory is the
//! process's own and may lie: the map is read only if it still has the seed
//! (a map freed and its memory reused is refused, not misread), its buckets
//! and overflow chains are bounded, its strings too.
//!
//! The map's buckets (`bmap` for string keys and values on 64 bits): 8
//! top-hash bytes, 8 keys and 8 values as (pointer, length), the overflow
//! bucket. A slot holds an entry when its top hash is at least
//! `minTopHash` (5); a map still growing keeps entries not yet moved in its
//! old buckets (those moved are marked there 2-4), so both arrays are read.

use crate::bpf::abi::{GO_LIST_MAX_LABELS, GO_LIST_PRINT_LABELS, PY_FP_MUL};
use crate::model::goroutine_labels::labels_name;
use crate::model::recording::FrameKind;
use crate::runtimes::frames::CodeInfo;
use crate::runtimes::python::read::CodeError;
use crate::sys::memory::read_process;

/// Labels read per map at most (pprof users set a few).
pub const MAX_LABELS: u64 = GO_LIST_MAX_LABELS;
/// Bytes of a key or value kept at most (longer ones are cut, said with `…`).
pub const MAX_LABEL_BYTES: u64 = 256;
/// `hmap.B` read at most: 16 buckets (a map of 64 labels needs 8).
const MAX_LOG_BUCKETS: u8 = 4;
/// Overflow buckets followed per bucket at most.
const MAX_OVERFLOW: usize = 4;
/// `sizeof(bmap)` for `map[string]string` on 64 bits.
const BUCKET_BYTES: usize = 8 + 8 * 16 + 8 * 16 + 8;
/// The lowest top hash of a slot holding an entry.
const MIN_TOP_HASH: u8 = 5;
/// `hmap.flags`: a same-size grow (old buckets as many as the new).
const SAME_SIZE_GROW: u8 = 8;

/// What names a goroutine's labels: a frame of kind [`FrameKind::GoLabels`]
/// named as [`labels_name`] says.
pub fn labels_frame(labels: &[(String, String)]) -> CodeInfo {
    CodeInfo {
        kind: FrameKind::GoLabels,
        qualname: labels_name(labels).into(),
        filename: "".into(),
        first_line: 0,
        line_table: Box::new([]),
    }
}

fn word(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// A Go string (pointer, length) of `pid`, cut to [`MAX_LABEL_BYTES`].
fn read_string(pid: u32, ptr: u64, len: u64) -> Result<String, CodeError> {
    if len > 1 << 30 || (len > 0 && ptr == 0) {
        return Err(CodeError::Malformed("label string"));
    }
    let mut bytes = vec![0u8; len.min(MAX_LABEL_BYTES) as usize];
    read_process(pid, ptr, &mut bytes).map_err(|_| CodeError::Unreadable)?;
    let mut s = String::from_utf8_lossy(&bytes).into_owned();
    if len > MAX_LABEL_BYTES {
        s.push('…');
    }
    Ok(s)
}

/// The labels of the map at `hmap` in `pid`, if it still has hash seed
/// `seed`, sorted by key.
pub fn read_labels(pid: u32, hmap: u64, seed: u32) -> Result<Vec<(String, String)>, CodeError> {
    let mut header = [0u8; 48];
    read_process(pid, hmap, &mut header).map_err(CodeError::of_read)?;
    let count = word(&header, 0);
    let (flags, log_buckets) = (header[8], header[9]);
    let hash0 = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    let (buckets, old) = (word(&header, 16), word(&header, 24));
    if hash0 != seed {
        return Err(CodeError::Replaced);
    }
    if count > MAX_LABELS || log_buckets > MAX_LOG_BUCKETS {
        return Err(CodeError::Malformed("label map"));
    }
    let mut labels = Vec::with_capacity(count as usize);
    let mut arrays = vec![(buckets, 1usize << log_buckets)];
    if old != 0 {
        let old_log = if flags & SAME_SIZE_GROW != 0 {
            log_buckets
        } else {
            log_buckets.saturating_sub(1)
        };
        arrays.push((old, 1 << old_log));
    }
    let mut bucket = [0u8; BUCKET_BYTES];
    for (array, n) in arrays {
        if array == 0 {
            continue;
        }
        for b in 0..n {
            let mut at = array.wrapping_add((b * BUCKET_BYTES) as u64);
            for _ in 0..=MAX_OVERFLOW {
                read_process(pid, at, &mut bucket).map_err(|_| CodeError::Unreadable)?;
                for slot in 0..8 {
                    if bucket[slot] < MIN_TOP_HASH {
                        continue;
                    }
                    if labels.len() as u64 >= count {
                        return Err(CodeError::Malformed("label map"));
                    }
                    let k = 8 + slot * 16;
                    let v = 8 + 8 * 16 + slot * 16;
                    labels.push((
                        read_string(pid, word(&bucket, k), word(&bucket, k + 8))?,
                        read_string(pid, word(&bucket, v), word(&bucket, v + 8))?,
                    ));
                }
                at = word(&bucket, BUCKET_BYTES - 8);
                if at == 0 {
                    break;
                }
            }
        }
    }
    if labels.len() as u64 != count {
        return Err(CodeError::Malformed("label map"));
    }
    labels.sort();
    Ok(labels)
}

/// A Go 1.24+ label list's fingerprint, as `ebpf/runtimes/go.bpf.h`
/// `go_list_fingerprint` makes it: the list's pointer and length, and the
/// first [`GO_LIST_PRINT_LABELS`] labels' words (zero where the list is
/// shorter), mixed.
pub fn list_fingerprint(ptr: u64, len: u64, first: &[u64]) -> u32 {
    let mut h = (ptr ^ len).wrapping_mul(PY_FP_MUL);
    for i in 0..4 * GO_LIST_PRINT_LABELS as usize {
        h = (h ^ first.get(i).copied().unwrap_or(0)).wrapping_mul(PY_FP_MUL);
    }
    (h >> 32) as u32 | 1
}

/// The labels of the Go 1.24+ `labelMap` at `addr` in `pid` (a list of
/// key-value string pairs, sorted by key), if its list still has the
/// fingerprint `print` the kernel made, sorted by key.
pub fn read_list_labels(
    pid: u32,
    addr: u64,
    print: u32,
) -> Result<Vec<(String, String)>, CodeError> {
    let mut header = [0u8; 16];
    read_process(pid, addr, &mut header).map_err(CodeError::of_read)?;
    let (ptr, len) = (word(&header, 0), word(&header, 8));
    if ptr == 0 || len == 0 || len > MAX_LABELS {
        // Not the list the kernel read (it reads none of these).
        return Err(CodeError::Replaced);
    }
    let mut list = vec![0u8; len as usize * 32];
    read_process(pid, ptr, &mut list).map_err(|_| CodeError::Unreadable)?;
    let words: Vec<u64> = (0..list.len() / 8).map(|i| word(&list, i * 8)).collect();
    let printed = words.len().min(4 * GO_LIST_PRINT_LABELS as usize);
    if list_fingerprint(ptr, len, &words[..printed]) != print {
        return Err(CodeError::Replaced);
    }
    let mut labels = Vec::with_capacity(len as usize);
    for label in words.chunks_exact(4) {
        labels.push((
            read_string(pid, label[0], label[1])?,
            read_string(pid, label[2], label[3])?,
        ));
    }
    labels.sort();
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's memory, laid out in this process (read back through
    /// `process_vm_readv` of our own pid): strings, buckets, a map header.
    struct FakeMap {
        strings: Vec<Vec<u8>>,
        buckets: Vec<Box<[u8; BUCKET_BYTES]>>,
    }

    impl FakeMap {
        fn new() -> FakeMap {
            FakeMap {
                strings: Vec::new(),
                buckets: Vec::new(),
            }
        }

        fn string(&mut self, s: &str) -> (u64, u64) {
            self.strings.push(s.as_bytes().to_vec());
            let b = self.strings.last().unwrap();
            (b.as_ptr() as u64, b.len() as u64)
        }

        /// A bucket holding `entries` in slots with these top hashes.
        fn bucket(&mut self, entries: &[(u8, &str, &str)]) -> usize {
            let mut b = Box::new([0u8; BUCKET_BYTES]);
            for (slot, &(top, k, v)) in entries.iter().enumerate() {
                b[slot] = top;
                let (kp, kl) = self.string(k);
                let (vp, vl) = self.string(v);
                let at = 8 + slot * 16;
                b[at..at + 8].copy_from_slice(&kp.to_le_bytes());
                b[at + 8..at + 16].copy_from_slice(&kl.to_le_bytes());
                let at = 8 + 8 * 16 + slot * 16;
                b[at..at + 8].copy_from_slice(&vp.to_le_bytes());
                b[at + 8..at + 16].copy_from_slice(&vl.to_le_bytes());
            }
            self.buckets.push(b);
            self.buckets.len() - 1
        }

        fn addr(&self, bucket: usize) -> u64 {
            self.buckets[bucket].as_ptr() as u64
        }

        fn overflow(&mut self, from: usize, to: u64) {
            self.buckets[from][BUCKET_BYTES - 8..].copy_from_slice(&to.to_le_bytes());
        }
    }

    fn header(
        count: u64,
        flags: u8,
        log_buckets: u8,
        seed: u32,
        buckets: u64,
        old: u64,
    ) -> Box<[u8; 48]> {
        let mut h = Box::new([0u8; 48]);
        h[0..8].copy_from_slice(&count.to_le_bytes());
        h[8] = flags;
        h[9] = log_buckets;
        h[12..16].copy_from_slice(&seed.to_le_bytes());
        h[16..24].copy_from_slice(&buckets.to_le_bytes());
        h[24..32].copy_from_slice(&old.to_le_bytes());
        h
    }

    fn read(h: &[u8; 48], seed: u32) -> Result<Vec<(String, String)>, CodeError> {
        read_labels(std::process::id(), h.as_ptr() as u64, seed)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_label_map_is_read_sorted_with_its_seed_only() {
        let mut m = FakeMap::new();
        let b = m.bucket(&[(0, "", ""), (77, "user", "u1"), (5, "handler", "beta")]);
        let h = header(2, 0, 0, 0xdead_beef, m.addr(b), 0);
        assert_eq!(
            read(&h, 0xdead_beef),
            Ok(pairs(&[("handler", "beta"), ("user", "u1")]))
        );
        // Another map at the address (its seed another): refused, not misread.
        assert_eq!(read(&h, 0xdead_bee0), Err(CodeError::Replaced));
        // An overflow bucket's entries, and a string cut at its bound.
        let long = "x".repeat(300);
        let more = m.bucket(&[(9, "path", &long)]);
        m.overflow(b, m.addr(more));
        let h = header(3, 0, 0, 1, m.addr(b), 0);
        let got = read(&h, 1).unwrap();
        assert_eq!(got[1].0, "path");
        assert_eq!(
            got[1].1,
            format!("{}…", "x".repeat(MAX_LABEL_BYTES as usize))
        );
    }

    #[test]
    fn a_growing_map_is_read_from_both_bucket_arrays_once_each() {
        let mut m = FakeMap::new();
        // Two new buckets (B = 1); the old one (B = 0) has one entry moved
        // (its slot marked evacuated, 2) and one not yet.
        let new0 = m.bucket(&[(10, "a", "1")]);
        let _new1 = m.bucket(&[]);
        let old = m.bucket(&[(2, "a", "stale"), (11, "b", "2")]);
        // The new array must be contiguous: copy both into one allocation.
        let mut array = vec![0u8; 2 * BUCKET_BYTES];
        array[..BUCKET_BYTES].copy_from_slice(&m.buckets[new0][..]);
        let h = header(2, 0, 1, 3, array.as_ptr() as u64, m.addr(old));
        assert_eq!(read(&h, 3), Ok(pairs(&[("a", "1"), ("b", "2")])));
    }

    #[test]
    fn a_lying_map_is_refused_not_followed() {
        let mut m = FakeMap::new();
        let b = m.bucket(&[(5, "k", "v"), (6, "k2", "v2")]);
        // A count other than the entries found, either way.
        assert!(matches!(
            read(&header(1, 0, 0, 7, m.addr(b), 0), 7),
            Err(CodeError::Malformed(_))
        ));
        assert!(matches!(
            read(&header(3, 0, 0, 7, m.addr(b), 0), 7),
            Err(CodeError::Malformed(_))
        ));
        // More labels or buckets than any label map has.
        assert!(read(&header(MAX_LABELS + 1, 0, 0, 7, m.addr(b), 0), 7).is_err());
        assert!(read(&header(2, 0, MAX_LOG_BUCKETS + 1, 7, m.addr(b), 0), 7).is_err());
        // An overflow chain that loops: bounded, and its repeated entries
        // exceed the count.
        let own = m.addr(b);
        m.overflow(b, own);
        assert!(matches!(
            read(&header(2, 0, 0, 7, own, 0), 7),
            Err(CodeError::Malformed(_))
        ));
        // A string claiming a gigabyte, and one at an unmapped address.
        let mut bad = FakeMap::new();
        let b = bad.bucket(&[(5, "k", "v")]);
        bad.buckets[b][8 + 8..8 + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(read(&header(1, 0, 0, 7, bad.addr(b), 0), 7).is_err());
        bad.buckets[b][8..16].copy_from_slice(&8u64.to_le_bytes());
        bad.buckets[b][8 + 8..8 + 16].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(
            read(&header(1, 0, 0, 7, bad.addr(b), 0), 7),
            Err(CodeError::Unreadable)
        );
    }

    /// A Go 1.24+ list in this process's memory: its labels' words, and
    /// the labelMap's (pointer, length, capacity) header.
    fn fake_list(m: &mut FakeMap, labels: &[(&str, &str)]) -> (Vec<u64>, Box<[u64; 3]>) {
        let mut words = Vec::new();
        for (k, v) in labels {
            let (kp, kl) = m.string(k);
            let (vp, vl) = m.string(v);
            words.extend([kp, kl, vp, vl]);
        }
        let header = Box::new([
            words.as_ptr() as u64,
            labels.len() as u64,
            labels.len() as u64,
        ]);
        (words, header)
    }

    fn print_of(words: &[u64]) -> u32 {
        let n = words.len().min(4 * GO_LIST_PRINT_LABELS as usize);
        list_fingerprint(words.as_ptr() as u64, words.len() as u64 / 4, &words[..n])
    }

    #[test]
    fn a_label_list_is_read_with_its_fingerprint_only() {
        let mut m = FakeMap::new();
        let (words, header) = fake_list(&mut m, &[("user", "u1"), ("handler", "beta"), ("a", "b")]);
        let read =
            |h: &[u64; 3], print| read_list_labels(std::process::id(), h.as_ptr() as u64, print);
        let print = print_of(&words);
        assert_eq!(
            read(&header, print),
            Ok(pairs(&[("a", "b"), ("handler", "beta"), ("user", "u1")]))
        );
        // Another list at the labelMap's address (other strings): refused.
        let (other, other_header) = fake_list(&mut m, &[("user", "u2"), ("handler", "beta")]);
        assert_eq!(read(&other_header, print), Err(CodeError::Replaced));
        assert_eq!(read(&other_header, print_of(&other)).unwrap()[1].1, "u2");
        // One label: the fingerprint's missing words are zeros.
        let (one, one_header) = fake_list(&mut m, &[("role", "sleeper")]);
        assert_eq!(
            read(&one_header, print_of(&one)),
            Ok(pairs(&[("role", "sleeper")]))
        );
    }

    #[test]
    fn a_lying_label_list_is_refused_not_followed() {
        let mut m = FakeMap::new();
        let (words, mut header) = fake_list(&mut m, &[("k", "v")]);
        let print = print_of(&words);
        let read = |h: &[u64; 3]| read_list_labels(std::process::id(), h.as_ptr() as u64, print);
        // Longer than any pprof user's, or empty, or nil: not the kernel's.
        header[1] = MAX_LABELS + 1;
        assert_eq!(read(&header), Err(CodeError::Replaced));
        header[1] = 0;
        assert_eq!(read(&header), Err(CodeError::Replaced));
        // A list at an unmapped address.
        *header = [8, 1, 1];
        assert_eq!(read(&header), Err(CodeError::Unreadable));
        // A string claiming a gigabyte, under a matching fingerprint.
        let mut bad = words.clone();
        bad[1] = 1 << 40;
        let h = Box::new([bad.as_ptr() as u64, 1, 1]);
        let p = print_of(&bad);
        assert!(read_list_labels(std::process::id(), h.as_ptr() as u64, p).is_err());
    }
}
