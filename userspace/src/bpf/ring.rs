//! A BPF ring buffer's reader, its data mapped once.
//!
//! In: a `BPF_MAP_TYPE_RINGBUF` map the kernel side writes records into.
//! Out: each committed record, as one or two byte slices (two when it wraps
//! past the ring's end), its space given back to the kernel after.
//!
//! Why not aya's `RingBuf`: it maps the data area twice in a row, as the
//! kernel lays it out, so every record reads as one slice; the kernel puts
//! every page of that mapping in place at `mmap`, so each ring counts twice
//! its size in the resident set for the whole recording (smaps: 8,196 KB
//! per 4-MiB ring), 16 MiB of `record`'s peak RSS beside pgbench. The
//! machine's memory is the same either way (the kernel allocated the ring
//! once, at the map's creation); what users and budgets read as our RSS is
//! not. The pump copies each record out of the ring anyway, so a record
//! that wraps is copied in two pieces instead.
//!
//! The protocol (the kernel's `kernel/bpf/ringbuf.c`): page 0 holds the
//! consumer position (ours to write), page 1 the producer position, the
//! data follows. Each record starts 8-aligned with an 8-byte header whose
//! first word is its length, with a busy bit while the producer writes it
//! and a discard bit if it was given up; positions only grow and are
//! masked into the data.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use aya::maps::MapData;

/// The record is still being written.
const BUSY_BIT: u32 = 1 << 31;
/// The record was given up: skip it.
const DISCARD_BIT: u32 = 1 << 30;
/// A record's header: its length and flags, then the page offset the
/// kernel keeps for itself.
const HEADER_BYTES: u32 = 8;

/// One BPF ring buffer, mapped for reading.
pub struct BpfRing {
    map: MapData,
    /// The consumer page (read-write).
    consumer: *mut u8,
    /// The producer page followed by the data, once.
    producer: *mut u8,
    page: usize,
    size: usize,
}

// SAFETY: the mappings are owned by this value; the consumer position is
// only written through `&mut self`, the rest only read.
unsafe impl Send for BpfRing {}

impl BpfRing {
    /// Map the ring of `map` (a ring buffer map).
    pub fn new(map: aya::maps::Map) -> std::io::Result<BpfRing> {
        let aya::maps::Map::RingBuf(map) = map else {
            return Err(std::io::Error::other("not a ring buffer map"));
        };
        let size = map.info().map_err(std::io::Error::other)?.max_entries() as usize;
        let page = crate::sideband::perf_ring::page_size();
        if !size.is_power_of_two() || size % page != 0 {
            return Err(std::io::Error::other(format!(
                "a ring of {size} bytes: not a power of two of pages"
            )));
        }
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: the kernel's layout: one writable consumer page at
        // offset 0; the producer page and the data, read-only, from
        // offset one page (a mapping shorter than the kernel's doubled
        // data is allowed). Each result is checked.
        let consumer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if consumer == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        let producer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page + size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                page as libc::off_t,
            )
        };
        if producer == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: the mapping just made, unmapped once.
            unsafe { libc::munmap(consumer, page) };
            return Err(e);
        }
        Ok(BpfRing {
            map,
            consumer: consumer as *mut u8,
            producer: producer as *mut u8,
            page,
            size,
        })
    }

    /// Hand every committed record to `each` (as one slice and an empty
    /// one, or two when it wraps), then give their space back. Stops at a
    /// record still being written. Returns the bytes the records took in
    /// the ring, headers and padding included.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8], &[u8])) -> usize {
        // SAFETY: the positions (the kernel's `unsigned long`s) are
        // naturally aligned at the start of their pages, shared with the
        // kernel (which writes the producer's and reads ours; the
        // producer's page is only loaded from); the data is `size` bytes
        // after the producer page.
        let (consumer, producer, data) = unsafe {
            (
                AtomicUsize::from_ptr(self.consumer as *mut usize),
                AtomicUsize::from_ptr(self.producer as *mut usize),
                std::slice::from_raw_parts(self.producer.add(self.page), self.size),
            )
        };
        drain_region(consumer, producer, data, &mut each)
    }
}

/// [`BpfRing::drain`] over the ring's positions and data (apart, to be
/// tested without a kernel).
fn drain_region(
    consumer: &AtomicUsize,
    producer: &AtomicUsize,
    data: &[u8],
    each: &mut impl FnMut(&[u8], &[u8]),
) -> usize {
    let size = data.len();
    debug_assert!(size.is_power_of_two() && size >= 8 && data.as_ptr() as usize % 8 == 0);
    let mut read = 0usize;
    let mut pos = consumer.load(Ordering::Relaxed);
    loop {
        let end = producer.load(Ordering::Acquire);
        let mut stopped = false;
        while pos < end {
            let at = pos & (size - 1);
            // SAFETY: the data is 8-aligned and its size a power of two
            // of at least 8; positions advance by multiples of 8, so `at`
            // is 8-aligned and the header lies whole inside the data.
            let header = unsafe { AtomicU32::from_ptr(data.as_ptr().add(at) as *mut u32) };
            // Pairs with the kernel's commit (a full barrier) so the
            // record's bytes are seen once its busy bit is clear.
            let mut len_flags = header.load(Ordering::Acquire);
            if len_flags & BUSY_BIT != 0 {
                // Give back what was read, then look once more: a commit
                // that saw the old position woke nobody (the kernel wakes
                // a reader only if it had caught up to the record, for
                // submits without a wake-up flag; this project's all pass
                // one, and the pump reads on a timer besides).
                consumer.store(pos, Ordering::Release);
                std::sync::atomic::fence(Ordering::SeqCst);
                len_flags = header.load(Ordering::Acquire);
                if len_flags & BUSY_BIT != 0 {
                    stopped = true;
                    break;
                }
            }
            let len = (len_flags & !(BUSY_BIT | DISCARD_BIT)) as usize;
            let took = (HEADER_BYTES as usize + len).next_multiple_of(8);
            if took > size || pos + took > end {
                // Not a record the kernel could have written: stop here
                // rather than walk garbage. Nothing past it is read again,
                // so the ring fills and the programs count what they could
                // not send (`DROP_RINGBUF_FULL`, said on the summary).
                stopped = true;
                break;
            }
            if len_flags & DISCARD_BIT == 0 {
                let body = (at + HEADER_BYTES as usize) & (size - 1);
                let first = len.min(size - body);
                each(&data[body..body + first], &data[..len - first]);
            }
            pos += took;
            read += took;
        }
        consumer.store(pos, Ordering::Release);
        if stopped {
            return read;
        }
        // Either the kernel sees the position just given back (and, for a
        // submit without a wake-up flag, wakes the reader for what it
        // commits next) or this sees its record.
        std::sync::atomic::fence(Ordering::SeqCst);
        if producer.load(Ordering::Acquire) == pos {
            return read;
        }
    }
}

impl AsRawFd for BpfRing {
    fn as_raw_fd(&self) -> RawFd {
        self.map.fd().as_fd().as_raw_fd()
    }
}

impl Drop for BpfRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped, once.
        unsafe {
            libc::munmap(self.consumer as *mut libc::c_void, self.page);
            libc::munmap(self.producer as *mut libc::c_void, self.page + self.size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of `words` u64s, written as the kernel would.
    struct FakeRing {
        consumer: AtomicUsize,
        producer: AtomicUsize,
        data: Vec<u64>,
    }

    impl FakeRing {
        fn new(words: usize, start: usize) -> FakeRing {
            FakeRing {
                consumer: AtomicUsize::new(start),
                producer: AtomicUsize::new(start),
                data: vec![0; words],
            }
        }

        fn bytes(&mut self) -> &mut [u8] {
            let len = self.data.len() * 8;
            // SAFETY: the words viewed as their bytes.
            unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr() as *mut u8, len) }
        }

        /// Reserve and write a record of `body` with header flags `flags`.
        fn put(&mut self, body: &[u8], flags: u32) {
            let pos = self.producer.load(Ordering::Relaxed);
            let size = self.data.len() * 8;
            let bytes = self.bytes();
            let at = pos & (size - 1);
            bytes[at..at + 4].copy_from_slice(&(body.len() as u32 | flags).to_ne_bytes());
            bytes[at + 4..at + 8].copy_from_slice(&0u32.to_ne_bytes());
            for (i, b) in body.iter().enumerate() {
                bytes[(at + 8 + i) & (size - 1)] = *b;
            }
            let took = (8 + body.len()).next_multiple_of(8);
            self.producer.store(pos + took, Ordering::Release);
        }

        fn drain(&mut self) -> (Vec<Vec<u8>>, usize, usize) {
            let mut got = Vec::new();
            let mut split = 0;
            let len = self.data.len() * 8;
            // SAFETY: the words viewed as their bytes.
            let data = unsafe { std::slice::from_raw_parts(self.data.as_ptr() as *const u8, len) };
            let read = drain_region(&self.consumer, &self.producer, data, &mut |a, b| {
                if !b.is_empty() {
                    split += 1;
                }
                got.push([a, b].concat());
            });
            (got, read, split)
        }
    }

    #[test]
    fn records_that_wrap_come_whole_and_their_space_is_given_back() {
        // 256 bytes, starting 40 bytes before the end, many times round.
        let mut ring = FakeRing::new(32, 1000 * 256 - 40);
        let mut expected = Vec::new();
        let mut splits = 0;
        for round in 0..200u32 {
            let body: Vec<u8> = (0..(round % 61 + 1))
                .map(|i| (i * 7 + round) as u8)
                .collect();
            ring.put(&body, 0);
            expected.push(body);
            if round % 3 == 2 {
                let before = ring.consumer.load(Ordering::Relaxed);
                let (got, read, split) = ring.drain();
                assert_eq!(got, std::mem::take(&mut expected));
                let after = ring.producer.load(Ordering::Relaxed);
                assert_eq!(ring.consumer.load(Ordering::Relaxed), after);
                assert_eq!(read, after - before);
                splits += split;
            }
        }
        assert!(splits > 10, "the records wrapped {splits} times");
    }

    #[test]
    fn a_busy_record_stops_the_read_and_a_discarded_one_is_skipped() {
        let mut ring = FakeRing::new(64, 0);
        ring.put(b"first", 0);
        ring.put(b"given up", DISCARD_BIT);
        ring.put(b"second", 0);
        let busy_at = ring.producer.load(Ordering::Relaxed);
        ring.put(b"still written", BUSY_BIT);
        ring.put(b"after it", 0);
        let (got, read, _) = ring.drain();
        assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
        assert_eq!(read, busy_at);
        assert_eq!(ring.consumer.load(Ordering::Relaxed), busy_at);
        // Committed: the rest follows.
        let at = busy_at;
        let len = b"still written".len() as u32;
        ring.bytes()[at..at + 4].copy_from_slice(&len.to_ne_bytes());
        let (got, _, _) = ring.drain();
        assert_eq!(got, vec![b"still written".to_vec(), b"after it".to_vec()]);
    }

    #[test]
    fn a_length_past_the_produced_end_or_the_ring_stops_the_read() {
        // 40 bytes claimed where 16 were produced; then more than the ring.
        for claimed in [40u32, 4000] {
            let mut ring = FakeRing::new(64, 0);
            ring.put(b"ok", 0);
            let at = ring.producer.load(Ordering::Relaxed);
            ring.put(b"liar", 0);
            ring.bytes()[at..at + 4].copy_from_slice(&claimed.to_ne_bytes());
            let (got, _, _) = ring.drain();
            assert_eq!(got, vec![b"ok".to_vec()]);
            assert_eq!(ring.consumer.load(Ordering::Relaxed), at);
        }
    }
}
