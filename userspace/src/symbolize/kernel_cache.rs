//! The kernel's own symbols kept between recordings of one boot: read from
//! `/proc/kallsyms` by the first recording, from a file of root's by the
//! ones after it.
//!
//! In: the symbols of the kernel and its modules ([`SymbolList::fixed`]),
//! and what they hold for: this boot's id, the kernel's release and the
//! module list (each module's name, size, state, address and taint from
//! `/proc/modules`, and its build id from `/sys/module/NAME/notes`). Out: the
//! same symbols, where a file made for the same boot, release and modules
//! is found in `/var/cache/sysprof` (or `SYSPROF_KALLSYMS_CACHE`; `off`
//! keeps none); nothing otherwise.
//!
//! Why: the kernel formats every one of its ~120,000 symbols each time
//! `/proc/kallsyms` is read. That was about 45 ms of a `record -a`'s CPU
//! beside pgbench (`perf record -g` of sysprof; `cat /proc/kallsyms`: 0.047 s
//! of system time on the quiet VM), paid again by every recording, and it
//! comes after the programs load, when the rings already fill. The kernel's
//! and its modules' symbols do not change while the module list does not.
//! What does change, BPF programs and the code the kernel makes at run time
//! (ftrace's and kprobes' trampolines), is never kept: the programs are
//! asked of the kernel each time (`bpf::jited`), whether the rest is kept
//! or read. So a frame in such code (a BPF trampoline or dispatcher, an
//! ftrace or kprobe trampoline) is named by the symbol before it, or left
//! unnamed past a program's end; kallsyms would name it. No frame of ours
//! runs in one.
//!
//! The file holds kernel addresses: it is read and written only in a
//! directory private to root, only if it is a regular file of root's, and
//! its sizes are checked against its length before anything is taken from
//! it: a file that does not parse whole is a miss.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::kernel::{SymbolHome, SymbolList};
use crate::sys::dir::DirHandle;

/// The directory of root's caches, unless `SYSPROF_KALLSYMS_CACHE` names
/// another (`off`: none kept).
const CACHE_DIR: &str = "/var/cache/sysprof";
const CACHE_FILE: &str = "kallsyms";
/// The file's first bytes, and its format's version.
const MAGIC: &[u8] = b"sysprof-kallsyms-1\n";
/// Most symbols a file may hold (a kernel with every module has ~250,000).
const MAX_SYMBOLS: usize = 1 << 22;
/// Most bytes of names a file may hold.
const MAX_NAME_BYTES: usize = 1 << 28;
/// Most bytes of the module list kept in the key; a longer list keeps nothing.
const MAX_MODULES_BYTES: u64 = 1 << 20;
/// Bytes of one symbol's entry: start (u64), name offset and length (u32 each).
const ENTRY_BYTES: usize = 16;

/// The cache's directory, if root's alone (see [`crate::sys::dir::root_private`]).
pub(crate) fn cache_dir() -> Option<DirHandle> {
    match std::env::var_os("SYSPROF_KALLSYMS_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => crate::sys::dir::root_private(Path::new(&v)),
        None => crate::sys::dir::root_private(Path::new(CACHE_DIR)),
    }
}

/// What the kernel's symbols hold for now: this boot's id, the kernel's
/// release and its modules (see the module doc). None where one of them
/// cannot be read (no cache then).
pub(crate) fn current_key() -> Option<Vec<u8>> {
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
    let release = std::fs::read("/proc/sys/kernel/osrelease").ok()?;
    // A kernel without modules has no list: its symbols are the kernel's.
    let modules = match std::fs::File::open("/proc/modules") {
        Ok(f) => {
            let mut text = Vec::new();
            f.take(MAX_MODULES_BYTES + 1).read_to_end(&mut text).ok()?;
            if text.len() as u64 > MAX_MODULES_BYTES {
                return None;
            }
            modules_key(&text, |name| {
                let mut id = Vec::new();
                let path = format!("/sys/module/{name}/notes/.note.gnu.build-id");
                if let Ok(f) = std::fs::File::open(path) {
                    let _ = f.take(MAX_NOTE_BYTES).read_to_end(&mut id);
                }
                id
            })?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => b"no modules".to_vec(),
        Err(_) => return None,
    };
    let mut key = Vec::with_capacity(boot.len() + release.len() + modules.len() + 2);
    for part in [&boot[..], b"\0", &release[..], b"\0", &modules[..]] {
        key.extend_from_slice(part);
    }
    Some(key)
}

/// Most bytes of a module's build-id note read.
const MAX_NOTE_BYTES: u64 = 4096;

/// The module list's part of the key: per line of `/proc/modules` (`NAME
/// SIZE REFCOUNT USED-BY STATE ADDRESS [TAINT]`), all but the reference
/// count and the users, which change while the code stays, and the build
/// id `note_of` reads for the name. None for a line that is not of that
/// form, or a name that is not one a module has.
fn modules_key(text: &[u8], mut note_of: impl FnMut(&str) -> Vec<u8>) -> Option<Vec<u8>> {
    let mut key = Vec::with_capacity(text.len());
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let fields: Vec<&[u8]> = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if fields.len() < 6 {
            return None;
        }
        let name = std::str::from_utf8(fields[0]).ok()?;
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return None;
        }
        for (i, field) in fields.iter().enumerate() {
            if i != 2 && i != 3 {
                key.extend_from_slice(field);
                key.push(b' ');
            }
        }
        // Hex: no build id's bytes can pass for the next line.
        for byte in note_of(name) {
            key.extend_from_slice(format!("{byte:02x}").as_bytes());
        }
        key.push(b'\n');
    }
    Some(key)
}

/// The symbols kept in `dir` for `key`, if a whole file of root's holds them.
pub(crate) fn load(dir: &DirHandle, key: &[u8]) -> Option<SymbolList> {
    let file = dir.open_read(CACHE_FILE).ok()?;
    let meta = file.metadata().ok()?;
    let most = MAGIC.len() + 4 + key.len() + 16 + MAX_SYMBOLS * ENTRY_BYTES + MAX_NAME_BYTES;
    if !meta.is_file() || meta.uid() != 0 || meta.mode() & 0o077 != 0 || meta.len() > most as u64 {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(meta.len()).read_to_end(&mut bytes).ok()?;
    decode(&bytes, key)
}

/// Keep `list` in `dir` for `key`: written beside, then renamed over the
/// old file (a reader sees the one or the other, whole). Not synced, and
/// its pages are kept: it is worth nothing after a reboot, and the next
/// recording reads it from memory.
pub(crate) fn store(dir: &DirHandle, key: &[u8], list: &SymbolList) -> std::io::Result<()> {
    let bytes = encode(key, list)?;
    crate::sys::atomic_file::replace_unsynced_in(dir, CACHE_FILE, ".kallsyms", &bytes)
}

/// The file's bytes: the magic, the key (length first), `_text`, the
/// counts, each symbol's entry, the names. Little-endian.
fn encode(key: &[u8], list: &SymbolList) -> std::io::Result<Vec<u8>> {
    let too_big = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "too many symbols");
    if list.entries.len() > MAX_SYMBOLS || list.names.len() > MAX_NAME_BYTES {
        return Err(too_big());
    }
    let key_len = u32::try_from(key.len()).map_err(|_| too_big())?;
    let mut out = Vec::with_capacity(
        MAGIC.len() + 4 + key.len() + 16 + list.entries.len() * ENTRY_BYTES + list.names.len(),
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&list.text.to_le_bytes());
    out.extend_from_slice(&(list.entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&(list.names.len() as u32).to_le_bytes());
    for &(addr, offset, len, _) in &list.entries {
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out.extend_from_slice(list.names.as_bytes());
    Ok(out)
}

/// Bytes read in order, each read checked against what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The symbols `bytes` hold for `key`; None unless they parse whole: the
/// magic, the same key, counts within bounds that the length matches
/// exactly, each name a nonempty span of the names on character
/// boundaries.
fn decode(bytes: &[u8], key: &[u8]) -> Option<SymbolList> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let key_len = r.u32()? as usize;
    if r.take(key_len)? != key {
        return None;
    }
    let text = r.u64()?;
    let count = r.u32()? as usize;
    let names_len = r.u32()? as usize;
    if count > MAX_SYMBOLS
        || names_len > MAX_NAME_BYTES
        || r.0.len() != count * ENTRY_BYTES + names_len
    {
        return None;
    }
    let entries_bytes = r.take(count * ENTRY_BYTES)?;
    let names = std::str::from_utf8(r.take(names_len)?).ok()?;
    let mut list = SymbolList {
        entries: Vec::with_capacity(count),
        names: names.to_owned(),
        text,
    };
    for entry in entries_bytes.chunks_exact(ENTRY_BYTES) {
        let mut e = Reader(entry);
        let (addr, offset, len) = (e.u64()?, e.u32()?, e.u32()?);
        let end = (offset as usize).checked_add(len as usize)?;
        if len == 0 || addr == 0 || names.get(offset as usize..end).is_none() {
            return None;
        }
        list.entries.push((addr, offset, len, SymbolHome::Fixed));
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::kernel::{read_list, FrameClass, KernelSymbols};

    const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81100000 t try_to_wake_up
ffffffff81100400 T __schedule
ffffffff81300100 T bpf_trace_run4
ffffffffc0001000 t bpf_prog_6deef7357e7b4530_on_sched_switch\t[bpf]
ffffffffc0100000 t ext4_readdir\t[ext4]
ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]
ffffffffc0300000 t ext4_r\u{e9}sum\u{e9}\t[ext4]
";

    fn list() -> SymbolList {
        read_list(KALLSYMS.as_bytes()).unwrap()
    }

    /// Check that only the kernel's and modules' symbols are kept, and that
    /// they come back as they went, for the same key only.
    #[test]
    fn keeps_the_fixed_symbols_for_their_key() {
        let fixed = list().fixed();
        let names: Vec<&str> = fixed
            .entries
            .iter()
            .map(|&(_, o, l, _)| &fixed.names[o as usize..(o + l) as usize])
            .collect();
        assert_eq!(
            names,
            [
                "_text",
                "try_to_wake_up",
                "__schedule",
                "bpf_trace_run4",
                "ext4_readdir",
                "ext4_r\u{e9}sum\u{e9}"
            ]
        );
        let bytes = encode(b"boot-a", &fixed).unwrap();
        assert_eq!(decode(&bytes, b"boot-a"), Some(fixed));
        assert_eq!(
            decode(&bytes, b"boot-b"),
            None,
            "another boot's file is a miss"
        );
    }

    /// Check that a file that does not parse whole is a miss: cut short at
    /// every length, a byte more, counts that lie, a span past the names or
    /// inside a character, an empty name, names that are not UTF-8.
    #[test]
    fn a_file_that_lies_is_a_miss() {
        let fixed = list().fixed();
        let bytes = encode(b"k", &fixed).unwrap();
        for n in 0..bytes.len() {
            assert_eq!(decode(&bytes[..n], b"k"), None, "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, b"k"), None);
        // Offsets of the header's fields and of the first entry.
        let counts = MAGIC.len() + 4 + 1 + 8;
        let first = counts + 8;
        let with = |at: usize, value: &[u8]| {
            let mut b = bytes.clone();
            b[at..at + value.len()].copy_from_slice(value);
            decode(&b, b"k")
        };
        assert_eq!(
            with(counts, &u32::MAX.to_le_bytes()),
            None,
            "a count past the bound"
        );
        assert_eq!(
            with(counts, &1u32.to_le_bytes()),
            None,
            "a count the length denies"
        );
        assert_eq!(
            with(counts + 4, &0u32.to_le_bytes()),
            None,
            "names the length denies"
        );
        assert_eq!(
            with(first + 8, &u32::MAX.to_le_bytes()),
            None,
            "a name past the names"
        );
        assert_eq!(with(first + 12, &0u32.to_le_bytes()), None, "an empty name");
        assert_eq!(with(first, &0u64.to_le_bytes()), None, "a zero address");
        // The last name is "ext4_résumé": a span ending inside its 'é'.
        let (_, o, l, _) = *fixed.entries.last().unwrap();
        let last = first + (fixed.entries.len() - 1) * ENTRY_BYTES;
        assert_eq!(
            with(last + 12, &(l - 1).to_le_bytes()),
            None,
            "inside a character"
        );
        let names_at = bytes.len() - fixed.names.len();
        let mut not_text = bytes.clone();
        not_text[names_at + o as usize + 6] = 0xff;
        assert_eq!(decode(&not_text, b"k"), None, "names that are not UTF-8");
        assert!(decode(&bytes, b"k").is_some(), "and the file itself parses");
    }

    /// Check the table made from kept symbols and the BPF programs asked of
    /// the kernel: a program's frame is named and cut as tracing up to its
    /// end, not past it; one packed right after another is its own.
    #[test]
    fn programs_are_added_with_their_ends() {
        let mut kept = list().fixed();
        // The later one first: the one packed after it must still win over
        // the end of the one before it, whatever order they are added in.
        kept.add_bpf(&[
            crate::bpf::jited::JitedFunction {
                start: 0xffffffffc0001100,
                len: 0x80,
                name: "bpf_prog_1122334455667788_sample_first".into(),
            },
            crate::bpf::jited::JitedFunction {
                start: 0xffffffffc0001000,
                len: 0x100,
                name: "bpf_prog_6deef7357e7b4530_on_sched_switch".into(),
            },
        ]);
        let k = KernelSymbols::from_list(kept);
        let name = |a: u64| k.lookup(a).map(|s| s.name);
        assert_eq!(
            name(0xffffffffc00010ff),
            Some("bpf_prog_6deef7357e7b4530_on_sched_switch")
        );
        assert_eq!(
            name(0xffffffffc0001100),
            Some("bpf_prog_1122334455667788_sample_first")
        );
        assert_eq!(
            name(0xffffffffc0001180),
            None,
            "past the last program's end"
        );
        assert_eq!(k.class(0xffffffffc0001050), FrameClass::Tracing);
        assert_eq!(k.class(0xffffffffc0001150), FrameClass::Tracing);
        assert_eq!(k.class(0xffffffffc0001180), FrameClass::Code);
        assert_eq!(name(0xffffffff81100410), Some("__schedule"));
        assert_eq!(k.text, 0xffffffff81000000);
    }

    /// Check the file's way through a directory, as root (a file of
    /// root's is what is trusted): stored and loaded back whole; not
    /// loaded for another key, nor when others may read it, nor as a
    /// symlink.
    #[test]
    fn stored_and_loaded_in_a_directory() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED stored_and_loaded_in_a_directory: needs root (only root's files are loaded)");
            return;
        }
        let d = std::env::temp_dir().join(format!("sysprof-kallsyms-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let dir = DirHandle::open(&d).unwrap();
        let fixed = list().fixed();
        store(&dir, b"key", &fixed).unwrap();
        assert_eq!(load(&dir, b"key"), Some(fixed.clone()));
        assert_eq!(load(&dir, b"another"), None);
        use std::os::unix::fs::PermissionsExt;
        let path = d.join(CACHE_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load(&dir, b"key"), None, "a file others could read");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load(&dir, b"key"), Some(fixed), "and 0600 again");
        std::fs::rename(&path, d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), &path).unwrap();
        assert_eq!(load(&dir, b"key"), None, "a symlink");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check the module list's key: the same when only a module's
    /// reference count or users change; another when its address, size,
    /// state or build id does; none for a line that is not a module's.
    #[test]
    fn the_module_key_follows_the_code_not_its_users() {
        let key = |text: &[u8], id: &[u8]| modules_key(text, |_| id.to_vec());
        let list = b"ext4 1003520 2 - Live 0xffffffffc0a00000\nmbcache 16384 1 ext4, Live 0xffffffffc0900000 (E)\n";
        let base = key(list, b"id1").unwrap();
        let used = b"ext4 1003520 5 jbd2, Live 0xffffffffc0a00000\nmbcache 16384 2 ext4,jbd2, Live 0xffffffffc0900000 (E)\n";
        assert_eq!(key(used, b"id1").unwrap(), base);
        assert_ne!(key(list, b"id2").unwrap(), base, "a rebuilt module");
        let moved = b"ext4 1003520 2 - Live 0xffffffffc0b00000\nmbcache 16384 1 ext4, Live 0xffffffffc0900000 (E)\n";
        assert_ne!(key(moved, b"id1").unwrap(), base, "moved");
        let bigger = b"ext4 1003521 2 - Live 0xffffffffc0a00000\nmbcache 16384 1 ext4, Live 0xffffffffc0900000 (E)\n";
        assert_ne!(key(bigger, b"id1").unwrap(), base, "another size");
        let loading = b"ext4 1003520 2 - Loading 0xffffffffc0a00000\nmbcache 16384 1 ext4, Live 0xffffffffc0900000 (E)\n";
        assert_ne!(key(loading, b"id1").unwrap(), base, "another state");
        assert_eq!(key(b"ext4 1003520 2 -\n", b""), None, "fields missing");
        assert_eq!(
            key(b"../x 1 0 - Live 0x0\n", b""),
            None,
            "not a module's name"
        );
    }

    /// Check, on this machine, that the table made from the cache names
    /// every kernel symbol as the table read from `/proc/kallsyms` does.
    #[test]
    fn the_cached_table_names_as_kallsyms_does() {
        let Ok(file) = std::fs::File::open("/proc/kallsyms") else {
            eprintln!("SKIPPED the_cached_table_names_as_kallsyms_does: no /proc/kallsyms");
            return;
        };
        let read = read_list(std::io::BufReader::new(file)).unwrap();
        if read.entries.is_empty() {
            eprintln!(
                "SKIPPED the_cached_table_names_as_kallsyms_does: addresses hidden (not root)"
            );
            return;
        }
        let bytes = encode(b"k", &read.fixed()).unwrap();
        let cached = KernelSymbols::from_list(decode(&bytes, b"k").unwrap());
        let fresh = KernelSymbols::from_list(read.clone());
        let mut checked = 0;
        for &(addr, _, _, home) in &read.entries {
            if home != SymbolHome::Fixed {
                continue;
            }
            for a in [addr, addr + 1] {
                let (c, f) = (cached.lookup(a), fresh.lookup(a));
                assert_eq!(c.map(|s| s.name), f.map(|s| s.name), "{a:x}");
                assert_eq!(cached.class(a), fresh.class(a), "{a:x}");
            }
            checked += 1;
        }
        assert!(checked > 1000, "only {checked} symbols");
        assert_eq!(cached.text, fresh.text);
    }
}
