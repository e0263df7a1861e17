//! The files that mapped code came from, opened while their process lived.
//!
//! In: executable mappings (from the sideband or the `/proc` snapshot) and
//! the pid they belong to. Out: one [`Binary`] per distinct file, identified
//! by what it is (device and inode, as the kernel reports the mapping) and
//! never by what it claims (a build id is only used to find debug files: a
//! user's copy of a program with the same build id and other contents is
//! another binary). The file is opened at once, through
//! `/proc/PID/map_files` (the mapped inode itself, even deleted or in
//! another mount namespace) or else `/proc/PID/root`, without blocking and
//! only if it is a regular file that is the inode that was mapped, so a
//! process that exits, a binary deleted or replaced, a path swapped for a
//! FIFO or a symlink by its owner, all leave us with the right file or none.

pub mod debugfile;
pub mod elf;
pub mod inflated;
pub mod jitdump;
pub mod perfmap;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

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
    /// GNU build id, read from the file when first needed.
    pub build_id: Option<Vec<u8>>,
    /// Why the file could not be opened, if it could not.
    pub open_error: Option<String>,
    /// The user of the first process seen mapping it (whose files a debug
    /// link next to the binary may name).
    pub owner_uid: Option<u32>,
}

impl Binary {
    /// A path that opens exactly the file we opened: our descriptor under
    /// `/proc/self/fd` (the original path may name another file by now).
    pub fn open_path(&self) -> Option<String> {
        self.file
            .as_ref()
            .map(|f| format!("/proc/self/fd/{}", f.as_raw_fd()))
    }
}

/// What identifies a mapped file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum BinaryKey {
    /// (major, minor, inode) of the mapped file.
    Inode(u32, u32, u64),
    /// A special mapping (`[vdso]`) or one without an inode.
    Path(String),
}

/// Every binary in use.
#[derive(Debug, Default)]
pub struct Binaries {
    list: Vec<Binary>,
    by_key: FxHashMap<BinaryKey, BinaryIndex>,
    /// Slots of released binaries, reused by the next ones.
    free: Vec<BinaryIndex>,
}

impl Binaries {
    /// An empty set.
    pub fn new() -> Binaries {
        Binaries::default()
    }

    /// The binary behind `m`, opened now if it is new.
    pub fn intern(&mut self, m: &MmapEvent) -> BinaryIndex {
        let key = match m.inode {
            Some((maj, min, ino)) if ino != 0 && m.path.starts_with('/') => {
                BinaryKey::Inode(maj, min, ino)
            }
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
        } else if m.path.starts_with('/') && !m.path.starts_with("//anon") {
            // (Anonymous memory is "//anon": no file. Opened through
            // map_files, its range could be a library's by then, mapped
            // over it since, and every process's JIT code would be walked
            // with that library's rows: seen with JVMs started after a
            // recording began.)
            match open_mapped_file(m) {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, Some(format!("{} is not a file", m.path)))
        };
        let name = m.path.rsplit('/').next().unwrap_or(&m.path).to_string();
        let owner_uid = process_uid(m.pid);
        let binary = Binary {
            path: m.path.clone(),
            name,
            file,
            build_id: m.build_id.clone(),
            open_error,
            owner_uid,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.list[i as usize] = binary;
                i
            }
            None => {
                self.list.push(binary);
                (self.list.len() - 1) as BinaryIndex
            }
        };
        self.by_key.insert(key, index);
        index
    }

    /// Close every binary that `live` does not hold (no live process maps
    /// it any more); their indices are reused, so whoever caches anything
    /// by index must forget the ones returned.
    pub fn release_unused(
        &mut self,
        live: &rustc_hash::FxHashSet<BinaryIndex>,
    ) -> Vec<BinaryIndex> {
        let mut released = Vec::new();
        self.by_key.retain(|_, i| {
            let keep = live.contains(i);
            if !keep {
                released.push(*i);
            }
            keep
        });
        for &i in &released {
            self.list[i as usize] = Binary {
                path: String::new(),
                name: String::new(),
                file: None,
                build_id: None,
                open_error: Some("released".into()),
                owner_uid: None,
            };
            self.free.push(i);
        }
        released
    }

    /// Binaries open now.
    pub fn open_count(&self) -> usize {
        self.by_key.len()
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

/// The real uid of a live process.
pub fn process_uid(pid: u32) -> Option<u32> {
    perfmap::process_identity(pid).map(|(uid, _)| uid)
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
            let (a, b) = (
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            );
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

/// Why a file a process mapped, or a path someone named, was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// open(2) failed.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path opened.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// fstat(2) of the opened file failed.
    #[error("{path}: {source}")]
    Stat {
        /// The path opened.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// It is a FIFO, a device, a directory or a socket.
    #[error("{path} is not a regular file")]
    NotRegular {
        /// The path opened.
        path: String,
    },
    /// fstat(2) of the file opened for a mapping failed.
    #[error("{0}")]
    MappedStat(#[source] std::io::Error),
    /// The path names another inode than the one the process mapped.
    #[error("{path} is no longer the file that was mapped (inode {mapped}, now {now})")]
    Replaced {
        /// The mapping's path.
        path: String,
        /// The inode that was mapped.
        mapped: u64,
        /// The inode the path names now.
        now: u64,
    },
}

impl OpenError {
    /// The OS error behind it, if one is.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            OpenError::Open { source, .. }
            | OpenError::Stat { source, .. }
            | OpenError::MappedStat(source) => Some(source),
            OpenError::NotRegular { .. } | OpenError::Replaced { .. } => None,
        }
    }

    /// Its kind, for callers that tell a missing file or a refusal from
    /// the rest (never by the message's words).
    pub fn kind(&self) -> std::io::ErrorKind {
        self.io_error()
            .map_or(std::io::ErrorKind::Other, std::io::Error::kind)
    }
}

impl From<OpenError> for std::io::Error {
    /// The same message, and the OS error's kind.
    fn from(e: OpenError) -> std::io::Error {
        std::io::Error::new(e.kind(), e)
    }
}

/// Open `path` for reading as what it must be: without blocking (a FIFO
/// would hang an `open`), without following a final symlink unless
/// `follow`, and only if it is a regular file.
pub fn open_regular(path: &str, follow: bool) -> Result<File, OpenError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| OpenError::Open {
            path: path.to_string(),
            source,
        })?;
    let meta = f.metadata().map_err(|source| OpenError::Stat {
        path: path.to_string(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular {
            path: path.to_string(),
        });
    }
    Ok(f)
}

/// Open the file behind a mapping the way the process sees it, and make
/// sure it is the inode that was mapped.
fn open_mapped_file(m: &MmapEvent) -> Result<File, OpenError> {
    // map_files names the mapped inode itself; it needs CAP_SYS_ADMIN.
    let by_map = format!(
        "/proc/{}/map_files/{:x}-{:x}",
        m.pid,
        m.start,
        m.start + m.len
    );
    let file = match open_regular(&by_map, true) {
        Ok(f) => f,
        // Through the process's root (containers), then ours: paths its
        // owner controls, so the inode must be the mapped one.
        Err(_) => open_regular(&format!("/proc/{}/root{}", m.pid, m.path), false)
            .or_else(|_| open_regular(&m.path, false))?,
    };
    if let Some((maj, min, ino)) = m.inode {
        let meta = file.metadata().map_err(OpenError::MappedStat)?;
        let dev = meta.dev();
        let (fmaj, fmin) = (libc::major(dev), libc::minor(dev));
        if ino != 0 && (meta.ino() != ino || fmaj != maj || fmin != min) {
            return Err(OpenError::Replaced {
                path: m.path.clone(),
                mapped: ino,
                now: meta.ino(),
            });
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// Check that open_regular's errors keep what the OS said: a missing
    /// file is NotFound (as stat(2) of the path says, and through
    /// `io::Error` too), a FIFO is refused as not a regular file, each with
    /// the message users see.
    #[test]
    fn open_errors_keep_their_kind() {
        let dir = std::env::temp_dir().join(format!("sysprof-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing");
        assert_eq!(
            std::fs::metadata(&missing).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        let missing = missing.to_str().unwrap();
        let e = open_regular(missing, true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(
            e.to_string()
                .starts_with(&format!("cannot open {missing}: ")),
            "{e}"
        );
        assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::NotFound);
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        let e = open_regular(fifo.to_str().unwrap(), false).unwrap_err();
        assert!(matches!(e, OpenError::NotRegular { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("{} is not a regular file", fifo.display())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
