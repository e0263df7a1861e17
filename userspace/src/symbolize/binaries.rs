//! The files that mapped code came from, opened while their process lived.
//!
//! In: executable mappings (from the sideband or the `/proc` snapshot) and
//! the pid they belong to. Out: one [`Binary`] per distinct file (by build
//! id, else device+inode, else path), holding an open `File`. The file is
//! opened at once through `/proc/PID/map_files` or `/proc/PID/root`, so a
//! process that exits, a binary deleted or replaced during the recording,
//! or one inside a container's mount namespace, can still be symbolized.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use rustc_hash::FxHashMap;

use crate::sideband::MmapEvent;

/// Index of a [`Binary`] in [`Binaries`].
pub type BinaryIndex = u32;

/// A file that code was mapped from.
#[derive(Debug)]
pub struct Binary {
    /// The path as the process saw it.
    pub path: String,
    /// File name of `path`.
    pub name: String,
    /// The file, when it could be opened.
    pub file: Option<File>,
    /// GNU build id, from the kernel or read from the file.
    pub build_id: Option<Vec<u8>>,
    /// Why the file could not be opened, if it could not.
    pub open_error: Option<String>,
}

impl Binary {
    /// A path blazesym can open that refers to exactly the file we opened:
    /// the original path when it still names the same inode (so debug links
    /// next to it resolve), else our descriptor under `/proc/self/fd`.
    pub fn open_path(&self) -> Option<String> {
        let file = self.file.as_ref()?;
        let ours = file.metadata().ok()?;
        if let Ok(now) = std::fs::metadata(&self.path) {
            if now.dev() == ours.dev() && now.ino() == ours.ino() && now.len() == ours.len() {
                return Some(self.path.clone());
            }
        }
        Some(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum BinaryKey {
    BuildId(Vec<u8>),
    Inode(u32, u32, u64),
    Path(String),
}

/// Every binary seen during the recording.
#[derive(Debug, Default)]
pub struct Binaries {
    list: Vec<Binary>,
    by_key: FxHashMap<BinaryKey, BinaryIndex>,
}

impl Binaries {
    /// An empty set.
    pub fn new() -> Binaries {
        Binaries::default()
    }

    /// The binary behind `m`, opened now if it is new.
    pub fn intern(&mut self, m: &MmapEvent) -> BinaryIndex {
        let key = match (&m.build_id, m.inode) {
            (Some(id), _) if !id.is_empty() => BinaryKey::BuildId(id.clone()),
            (_, Some((maj, min, ino))) if ino != 0 => BinaryKey::Inode(maj, min, ino),
            _ => BinaryKey::Path(m.path.clone()),
        };
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        let (file, open_error) = if m.path == "[vdso]" {
            match own_vdso_image() {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(format!("cannot copy the vDSO: {e}"))),
            }
        } else if m.path.starts_with('/') {
            match open_mapped_file(m) {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, Some(format!("{} is not a file", m.path)))
        };
        let name = m.path.rsplit('/').next().unwrap_or(&m.path).to_string();
        let index = self.list.len() as BinaryIndex;
        self.list.push(Binary { path: m.path.clone(), name, file, build_id: m.build_id.clone(), open_error });
        self.by_key.insert(key, index);
        index
    }

    /// The binary at `index`.
    pub fn get(&self, index: BinaryIndex) -> &Binary {
        &self.list[index as usize]
    }

    /// Mutable access, to fill in build ids read later.
    pub fn get_mut(&mut self, index: BinaryIndex) -> &mut Binary {
        &mut self.list[index as usize]
    }

    /// Number of binaries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when none was seen.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// The vDSO as a file. Every process on this kernel maps the same vDSO image,
/// so our own copy (at `AT_SYSINFO_EHDR`) symbolicates theirs; its file
/// offsets equal its virtual offsets because it is one mapping at offset 0.
fn own_vdso_image() -> std::io::Result<File> {
    use std::io::Write;
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return Err(std::io::Error::other("no AT_SYSINFO_EHDR"));
    }
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let len = maps
        .lines()
        .filter(|l| l.ends_with("[vdso]"))
        .find_map(|l| {
            let (range, _) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            let (a, b) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
            (a == base).then_some(b - a)
        })
        .ok_or_else(|| std::io::Error::other("no [vdso] line in /proc/self/maps"))?;
    // SAFETY: [base, base+len) is our own mapped, readable vDSO.
    let image = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
    let mut file = tempfile_in_memory()?;
    file.write_all(image)?;
    Ok(file)
}

fn tempfile_in_memory() -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    // SAFETY: valid NUL-terminated name; the fd is new and owned by the File.
    let fd = unsafe { libc::memfd_create(c"sysprof-vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Open the file behind a mapping the way the process sees it.
fn open_mapped_file(m: &MmapEvent) -> Result<File, String> {
    // map_files names the mapped inode itself, even if deleted or in another
    // mount namespace; it needs CAP_SYS_ADMIN, which `record` has as root.
    let by_map = format!("/proc/{}/map_files/{:x}-{:x}", m.pid, m.start, m.start + m.len);
    if let Ok(f) = File::open(&by_map) {
        return Ok(f);
    }
    let by_root = format!("/proc/{}/root{}", m.pid, m.path);
    if let Ok(f) = File::open(&by_root) {
        return Ok(f);
    }
    File::open(&m.path).map_err(|e| format!("cannot open {}: {e}", m.path))
}
