//! The in-kernel unwinder's maps as the loader hands them over: the rows
//! array (written through short-lived mappings of its pages), the process
//! entries, the refused-pid bitmap and the CPython processes. In: the loaded sampler's maps. Out:
//! [`KernelUnwindMaps`], which `unwind::kernel` fills.

use std::os::fd::AsFd;

use aya::maps::{Array as BpfArray, HashMap as BpfHashMap, MapData};

use super::abi::{PythonProcess, Row, UnwindProcess};

/// The BPF maps of the in-kernel unwinder, taken from the loaded sampler.
pub struct KernelUnwindMaps {
    /// `unwind_rows`, mapped into our memory.
    pub rows: RowsMapping,
    /// `unwind_processes`.
    pub processes: BpfHashMap<MapData, u32, UnwindProcess>,
    /// `unwind_refused`: one bit per pid refused an entry.
    pub refused: BpfArray<MapData, u64>,
    /// `python_procs`: where each CPython process keeps its threads' frames.
    pub python: BpfHashMap<MapData, u32, PythonProcess>,
    /// Entries `processes` holds at most.
    pub process_capacity: u32,
}

/// `unwind_rows` (a `BPF_F_MMAPABLE` array), written through a mapping of
/// just the pages a table goes to, unmapped again at once: the array is
/// kernel memory, and pages left mapped here would count in our resident
/// set (rustc's tables alone are 20 MiB).
pub struct RowsMapping {
    map: MapData,
    len: usize,
}

impl RowsMapping {
    /// The array `map`, of `capacity` rows.
    pub fn new(map: MapData, capacity: usize) -> std::io::Result<RowsMapping> {
        Ok(RowsMapping { map, len: capacity })
    }

    /// Rows the array holds.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Write `rows` from row `start` on.
    pub fn write(&mut self, start: usize, rows: &[Row]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        const PAGE: usize = 4096;
        let size = std::mem::size_of::<Row>();
        if start + rows.len() > self.len {
            return Err(std::io::Error::other("rows past the array's end"));
        }
        let (first, end) = (start * size, (start + rows.len()) * size);
        let map_start = first / PAGE * PAGE;
        let map_len = end.next_multiple_of(PAGE) - map_start;
        let fd = self.map.fd().as_fd();
        // SAFETY: a shared mapping of pages of the array that lie within it
        // (the kernel checks the range against the map's size).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                map_start as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: [first, end) lies in the mapping, which nothing else uses;
        // Row is plain old data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                rows.as_ptr() as *const u8,
                (ptr as *mut u8).add(first - map_start),
                end - first,
            );
            libc::munmap(ptr, map_len);
        }
        Ok(())
    }
}
