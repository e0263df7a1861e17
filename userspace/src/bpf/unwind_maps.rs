//! The in-kernel unwinder's maps as the loader hands them over: the rows
//! (chunks created as tables need them, written through short-lived
//! mappings of their pages, deleted when no table has rows there; read
//! through mappings kept until the window ends, by the walk of handed-over
//! stacks over the same rows), the process entries, the refused-pid bitmap
//! and the CPython processes. In: the loaded sampler's maps. Out:
//! [`KernelUnwindMaps`], which `unwind::kernel` fills and reads.

use std::os::fd::AsFd;

use aya::maps::{Array as BpfArray, ArrayOfMaps, HashMap as BpfHashMap, MapData, MapFd};

use super::abi::{ExecRecord, PythonProcess, Row, UnwindProcess};

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
    /// `exec_times`: each process's last exec and the real uid it exec'd as.
    pub execs: BpfHashMap<MapData, u32, ExecRecord>,
    /// Entries `processes` holds at most.
    pub process_capacity: u32,
}

/// `unwind_rows`: the rows, in chunks of [`UNWIND_CHUNK_ROWS`] (each a
/// `BPF_F_MMAPABLE` array in the outer array of maps), each created when a
/// table first goes there. The budget was one array allocated whole at
/// load: 64 MiB of kernel memory for `--unwind-table-mb 64` while the tables
/// of a busy VM took 7 MiB. Rows are written through a mapping of just the
/// pages a table goes to, unmapped again at once: pages left mapped here
/// would count in our resident set (rustc's tables alone are 20 MiB).
pub struct RowsMapping {
    chunks_map: ArrayOfMaps<MapData, MapFd>,
    /// The outer array's descriptor again, to delete chunks (aya's
    /// `ArrayOfMaps` only sets them).
    chunks_fd: std::os::fd::OwnedFd,
    /// The chunks created, by index.
    chunks: Vec<Option<MapData>>,
    /// Read-only mappings of chunks, made when a walk in userspace first
    /// reads rows there ([`RowsMapping::row`]) and dropped at
    /// [`RowsMapping::unmap_reads`] (each window): the kernel maps all of a
    /// chunk's pages at once, so each chunk mapped counts whole (2 MiB) in
    /// our resident set until then (ARCHITECTURE 87).
    reads: Vec<Option<ChunkView>>,
    len: usize,
}

/// A read-only mapping of one chunk's rows.
struct ChunkView(std::ptr::NonNull<Row>);

impl ChunkView {
    const BYTES: usize = UNWIND_CHUNK_ROWS * std::mem::size_of::<Row>();

    fn map(fd: std::os::fd::BorrowedFd<'_>) -> Option<ChunkView> {
        use std::os::fd::AsRawFd;
        // SAFETY: a shared read-only mapping of the whole array, whose size
        // is exactly this (the kernel refuses a larger one).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::BYTES,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        std::ptr::NonNull::new(ptr as *mut Row).map(ChunkView)
    }

    fn get(&self, at: usize) -> Row {
        debug_assert!(at < UNWIND_CHUNK_ROWS);
        // SAFETY: at < UNWIND_CHUNK_ROWS rows lie in the mapping (page
        // aligned, so aligned for Row); Row is plain old data, and only
        // this thread writes rows (through mappings of their own).
        unsafe { std::ptr::read_volatile(self.0.as_ptr().add(at)) }
    }
}

// SAFETY: the mapping is owned by the view alone and only read; moving it
// to another thread moves that ownership.
unsafe impl Send for ChunkView {}

impl Drop for ChunkView {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe {
            libc::munmap(self.0.as_ptr() as *mut libc::c_void, Self::BYTES);
        }
    }
}

/// Rows per chunk of `unwind_rows` (`UNWIND_CHUNK_ROWS` in sysprof.h).
pub const UNWIND_CHUNK_ROWS: usize = 1 << 18;

impl RowsMapping {
    /// The outer array `map`, for `capacity` rows in all.
    pub fn new(map: MapData, capacity: usize) -> std::io::Result<RowsMapping> {
        let chunks_fd = map.fd().as_fd().try_clone_to_owned()?;
        let chunks_map = ArrayOfMaps::try_from(aya::maps::Map::ArrayOfMaps(map))
            .map_err(std::io::Error::other)?;
        let n = capacity.div_ceil(UNWIND_CHUNK_ROWS);
        if (chunks_map.len() as usize) < n {
            return Err(std::io::Error::other(format!(
                "unwind_rows holds {} chunks, {n} wanted",
                chunks_map.len()
            )));
        }
        Ok(RowsMapping {
            chunks_map,
            chunks_fd,
            chunks: (0..n).map(|_| None).collect(),
            reads: (0..n).map(|_| None).collect(),
            len: capacity,
        })
    }

    /// Rows the array holds.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Kernel memory the chunks created take (their rows' bytes).
    pub fn allocated_bytes(&self) -> u64 {
        (self.chunks.iter().flatten().count() * UNWIND_CHUNK_ROWS * std::mem::size_of::<Row>())
            as u64
    }

    /// Write `rows` from row `start` on, creating the chunks they go to.
    pub fn write(&mut self, start: usize, rows: &[Row]) -> std::io::Result<()> {
        if start + rows.len() > self.len {
            return Err(std::io::Error::other("rows past the array's end"));
        }
        let mut at = start;
        let mut rest = rows;
        while !rest.is_empty() {
            let (chunk, offset) = (at / UNWIND_CHUNK_ROWS, at % UNWIND_CHUNK_ROWS);
            let n = rest.len().min(UNWIND_CHUNK_ROWS - offset);
            let map = self.chunk(chunk)?;
            write_rows(map.fd().as_fd(), offset, &rest[..n])?;
            at += n;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Give back the chunks wholly inside rows `[from, to)`, where no table
    /// has rows: their kernel memory is freed once no walk still holds
    /// them. Chunks that could not be deleted stay (and count).
    pub fn release(&mut self, from: usize, to: usize) {
        let first = from.div_ceil(UNWIND_CHUNK_ROWS);
        let end = (to / UNWIND_CHUNK_ROWS).min(self.chunks.len());
        for i in first..end {
            // A read mapping would keep the chunk's memory alive.
            self.reads[i] = None;
            if self.chunks[i].is_some() && delete_slot(self.chunks_fd.as_fd(), i as u32).is_ok() {
                self.chunks[i] = None;
            }
        }
    }

    /// Row `idx`, read through a mapping of its chunk (made on first
    /// use); None where no chunk was created or it cannot be mapped.
    pub fn row(&mut self, idx: usize) -> Option<Row> {
        let (chunk, at) = (idx / UNWIND_CHUNK_ROWS, idx % UNWIND_CHUNK_ROWS);
        if self.reads.get(chunk)?.is_none() {
            let view = ChunkView::map(self.chunks.get(chunk)?.as_ref()?.fd().as_fd())?;
            self.reads[chunk] = Some(view);
        }
        Some(self.reads[chunk].as_ref()?.get(at))
    }

    /// The last row at or below `pc` of the table at rows `[start, start +
    /// len)`, as the kernel's walk finds it; None if there is none.
    pub fn find_row(&mut self, start: u32, len: u32, pc: u32) -> Option<Row> {
        let (mut lo, mut hi) = (0u32, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.row((start + mid) as usize)?.pc <= pc {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
            .and_then(|i| self.row((start + i) as usize))
    }

    /// Drop the read mappings: the pages walks touched leave the resident set.
    pub fn unmap_reads(&mut self) {
        self.reads.iter_mut().for_each(|r| *r = None);
    }

    /// Chunk `i`, created (and put in the outer array) if it was not yet.
    fn chunk(&mut self, i: usize) -> std::io::Result<&MapData> {
        if self.chunks[i].is_none() {
            let def = aya_obj::Map::new_from_params(
                BPF_MAP_TYPE_ARRAY,
                std::mem::size_of::<u32>() as u32,
                std::mem::size_of::<Row>() as u32,
                UNWIND_CHUNK_ROWS as u32,
                BPF_F_MMAPABLE,
            );
            let chunk =
                MapData::create(def, "unwind_chunk", None).map_err(std::io::Error::other)?;
            self.chunks_map
                .set(i as u32, chunk.fd(), 0)
                .map_err(std::io::Error::other)?;
            self.chunks[i] = Some(chunk);
        }
        Ok(self.chunks[i].as_ref().expect("just created"))
    }
}

/// Empty slot `index` of the array of maps `fd` (`BPF_MAP_DELETE_ELEM`).
fn delete_slot(fd: std::os::fd::BorrowedFd<'_>, index: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    /// `union bpf_attr` as the element commands read it (linux/bpf.h).
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    let attr = ElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: &index as *const u32 as u64,
        value: 0,
        flags: 0,
    };
    // SAFETY: a valid attribute of the size given; the key outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_DELETE_ELEM,
            &attr as *const ElemAttr,
            std::mem::size_of::<ElemAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `BPF_F_MMAPABLE` (linux/bpf.h): an array userspace can map.
const BPF_F_MMAPABLE: u32 = 1 << 10;
/// `BPF_MAP_TYPE_ARRAY` (linux/bpf.h).
const BPF_MAP_TYPE_ARRAY: u32 = 2;

/// Write `rows` into the mmapable array `fd` from row `start` on.
fn write_rows(fd: std::os::fd::BorrowedFd<'_>, start: usize, rows: &[Row]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const PAGE: usize = 4096;
    let size = std::mem::size_of::<Row>();
    {
        let (first, end) = (start * size, (start + rows.len()) * size);
        let map_start = first / PAGE * PAGE;
        let map_len = end.next_multiple_of(PAGE) - map_start;
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
    }
    Ok(())
}
