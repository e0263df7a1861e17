//! A consumer for one perf mmap ring buffer.
//!
//! In: a perf event fd. Out: each record in the ring, as its header fields and
//! body bytes (which may wrap around the end of the ring, hence
//! [`RawData::Split`]). perf-event-open-sys gives the ABI and
//! linux-perf-event-reader parses records, but neither owns the mmap'd ring
//! itself, so this small piece does: map it, read `data_head` with acquire
//! ordering, hand out records, publish `data_tail` with release ordering.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use linux_perf_event_reader::RawData;
use perf_event_open_sys::bindings::perf_event_mmap_page;

/// One mapped perf ring buffer (a metadata page followed by 2^n data pages).
pub struct PerfRing {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value and only touched through &mut self.
unsafe impl Send for PerfRing {}

/// Header of one perf record.
#[derive(Debug, Clone, Copy)]
pub struct RecordHeader {
    /// `PERF_RECORD_*`.
    pub kind: u32,
    /// `misc` bits.
    pub misc: u16,
}

impl PerfRing {
    /// Map `data_pages` (a power of two) pages of ring for `fd`.
    pub fn new(fd: OwnedFd, data_pages: usize) -> std::io::Result<PerfRing> {
        let page = page_size();
        let map_len = page * (1 + data_pages);
        // SAFETY: mapping a perf fd with the documented layout; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let meta = base as *const perf_event_mmap_page;
        // SAFETY: the first page is the metadata page.
        let (data_offset, data_size) =
            unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        let (data_offset, data_size) = if data_size == 0 {
            (page, page * data_pages)
        } else {
            (data_offset, data_size)
        };
        Ok(PerfRing {
            fd,
            base: base as *mut u8,
            map_len,
            data_offset,
            data_size,
        })
    }

    /// The event's fd.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.base as *mut perf_event_mmap_page;
        // SAFETY: data_head/data_tail are naturally aligned u64s in the shared page;
        // the kernel writes head and reads tail, we do the opposite.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        }
    }

    /// Hand every record now in the ring to `f`, then free their space.
    /// Returns the number of records read.
    pub fn drain(&mut self, mut f: impl FnMut(RecordHeader, RawData<'_>)) -> usize {
        let (head, tail) = self.head_tail();
        let head_pos = head.load(Ordering::Acquire);
        let mut pos = tail.load(Ordering::Relaxed);
        // SAFETY: the data area is data_size bytes at data_offset inside the mapping.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let mut count = 0;
        while pos + 8 <= head_pos {
            let at = (pos % self.data_size as u64) as usize;
            let mut hdr = [0u8; 8];
            for (i, b) in hdr.iter_mut().enumerate() {
                *b = data[(at + i) % self.data_size];
            }
            let kind = u32::from_ne_bytes(hdr[0..4].try_into().unwrap());
            let misc = u16::from_ne_bytes(hdr[4..6].try_into().unwrap());
            let size = u16::from_ne_bytes(hdr[6..8].try_into().unwrap()) as u64;
            if size < 8 || pos + size > head_pos {
                // A corrupt size would loop forever; skip to head and let the caller count it.
                break;
            }
            let body_at = (at + 8) % self.data_size;
            let body_len = size as usize - 8;
            let body = if body_at + body_len <= self.data_size {
                RawData::Single(&data[body_at..body_at + body_len])
            } else {
                let first = self.data_size - body_at;
                RawData::Split(&data[body_at..], &data[..body_len - first])
            };
            f(RecordHeader { kind, misc }, body);
            pos += size;
            count += 1;
        }
        tail.store(head_pos.max(pos), Ordering::Release);
        count
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}
