//! Names the symbolizer does not give, from a binary's own tables: PLT
//! stubs as `name@plt`, and the public name among aliased functions.
//!
//! In: an [`ElfReader`] (its symbol tables, dynamic relocations and PLT
//! sections, each within the section limit; a damaged one gives nothing).
//! Out: [`NameTables`]: address -> public name where several function
//! symbols share one, and the PLT stubs' ranges with the function each
//! jumps to (decoded as perf does, x86_64 only).

use std::fs::File;
use std::os::unix::fs::FileExt;

use object::elf;
use object::read::elf::{SectionHeader, Sym};
use rustc_hash::FxHashMap;

use super::{ElfReader, Headers};

/// One function symbol, without its name: where it is, where its name
/// lies in its table's strings, which table (0 `.symtab`, 1 `.dynsym`)
/// and how public it is ([`alias_rank`]).
#[derive(Clone, Copy)]
struct FunctionSym {
    addr: u64,
    name: u32,
    table: u8,
    rank: u8,
}

/// A symbol table's strings, read whole with one `pread` when they are at
/// most [`NAMES_WHOLE_MAX`] bytes, else through one window of
/// [`NAMES_WINDOW`] bytes: names of neighbouring symbols usually lie near
/// each other, so most come from the window already read (one `pread` per
/// name cost libpython's 15,000 symbols 20 ms, the time a new Python
/// process went without Python frames). Where they do not (libc's
/// `.dynstr`, libpython's `.strtab`), a window was one `pread` per name
/// all the same: ~380 for libc, ~3,000 for libpython, each time a new
/// process mapped them. Why not through the reader's cache: object's
/// `ReadCache` keeps every string read through it (a box and a hash entry
/// each) for the reader's life, and reading every name of librustc_driver's
/// and libLLVM's symbol tables (165,000 and 258,000 functions) that way, to
/// find the few that share an address, was most of the agent's 181-MB
/// peak beside a `cargo build` (heaptrack).
struct Names<'f> {
    file: &'f File,
    start: u64,
    end: u64,
    max_len: usize,
    /// The window: `buf[..window_len]` holds the file's bytes from `window_at`.
    buf: Vec<u8>,
    window_at: u64,
    window_len: usize,
    /// The whole section was read into the window (see [`NAMES_WHOLE_MAX`]).
    read_whole: bool,
    /// [`NAMES_WHOLE_MAX`] (a test sets 0 to read through the window).
    whole_max: u64,
}

/// Bytes of a strings section read at once: a page. Where names lie in
/// the order of their symbols (libpython) a window serves hundreds; where
/// the linker merged them out of order (node's 7.5 MB of names) each may
/// need its own read, which a bigger window would make a bigger copy
/// (64 KiB made node's constants take 0.35 s to find).
const NAMES_WINDOW: usize = 4 << 10;

/// Strings sections up to this size are read whole, once: libc's `.dynstr`
/// is 32 KiB, libpython's `.strtab` 376 KiB; the memory is the reader's
/// until its names are read (then freed), whatever the file claims.
const NAMES_WHOLE_MAX: u64 = 1 << 20;

impl<'f> Names<'f> {
    /// The strings section linked from symbol table `section`.
    fn of(
        reader: &ElfReader<'f>,
        h: &Headers<'_, 'f>,
        section: &object::elf::SectionHeader64<object::Endianness>,
    ) -> Option<Names<'f>> {
        let strings = h
            .sections
            .section(object::SectionIndex(section.sh_link(h.endian) as usize))
            .ok()?;
        if strings.sh_type(h.endian) != elf::SHT_STRTAB {
            return None;
        }
        let (start, size) = (strings.sh_offset(h.endian), strings.sh_size(h.endian));
        let end = start.checked_add(size)?.min(reader.file_len);
        Some(Names {
            file: reader.file,
            start,
            end,
            max_len: reader.limits.max_name_len,
            buf: Vec::new(),
            window_at: 0,
            window_len: 0,
            read_whole: false,
            whole_max: NAMES_WHOLE_MAX,
        })
    }

    /// The name at `offset`, cut at the name limit; none when it runs past
    /// its section without a NUL or cannot be read.
    fn name(&mut self, offset: u32) -> Option<&[u8]> {
        let at = self
            .start
            .checked_add(u64::from(offset))
            .filter(|&at| at < self.end)?;
        // A name is found within the limit or cut there: at most one byte
        // more than the limit decides it, however long the string claims
        // to be.
        let want = ((self.end - at) as usize).min(self.max_len + 1);
        let in_window =
            at >= self.window_at && at + want as u64 <= self.window_at + self.window_len as u64;
        if !in_window {
            // The section whole when small enough (then never read again,
            // even when it read short: the file changed under us), else a
            // window from this name on.
            let whole = self.end - self.start <= self.whole_max;
            if whole && self.read_whole {
                return None;
            }
            self.read_whole = whole;
            let (at, len) = if whole {
                (self.start, (self.end - self.start) as usize)
            } else {
                (at, ((self.end - at) as usize).min(NAMES_WINDOW.max(want)))
            };
            self.buf.resize(len, 0);
            self.window_at = at;
            self.window_len = 0;
            while self.window_len < len {
                match self.file.read_at(
                    &mut self.buf[self.window_len..len],
                    at + self.window_len as u64,
                ) {
                    Ok(0) => break,
                    Ok(n) => self.window_len += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.window_len = 0;
                        return None;
                    }
                }
            }
        }
        let from = (at - self.window_at) as usize;
        let name = &self.buf[from..(from + want).min(self.window_len)];
        match name.iter().position(|&b| b == 0) {
            Some(len) => Some(&name[..len.min(self.max_len)]),
            // Past the limit without its end: cut, as every name is.
            None if name.len() > self.max_len => Some(&name[..self.max_len]),
            None => None,
        }
    }
}

impl<'f> ElfReader<'f> {
    /// Append the function symbols of one symbol table section (`.symtab`
    /// or `.dynsym`, numbered `table`) to `out`, and return its names; a
    /// damaged table gives none.
    fn function_syms(
        &self,
        h: &Headers<'_, 'f>,
        sh_type: elf::SectionType,
        table: u8,
        out: &mut Vec<FunctionSym>,
    ) -> Option<Names<'f>> {
        let (index, section) = h
            .sections
            .enumerate()
            .find(|(_, s)| s.sh_type(h.endian) == sh_type)?;
        self.check_range(
            "symbol table",
            section.sh_offset(h.endian),
            section.sh_size(h.endian),
            self.limits.max_section_bytes,
        )
        .ok()?;
        let symbols = object::read::elf::SymbolTable::parse(
            h.endian,
            &self.data,
            &h.sections,
            index,
            section,
        )
        .ok()?;
        for sym in symbols.iter() {
            let kind = sym.st_type();
            if !(kind == elf::STT_FUNC || kind == elf::STT_GNU_IFUNC)
                || sym.st_shndx(h.endian) == elf::SHN_UNDEF
            {
                continue;
            }
            let (addr, name) = (sym.st_value(h.endian), sym.st_name(h.endian));
            if addr != 0 && name != 0 {
                out.push(FunctionSym {
                    addr,
                    name,
                    table,
                    rank: alias_rank(sym.st_bind(), sym.st_visibility()),
                });
            }
        }
        Names::of(self, h, section)
    }

    /// Defined symbols of any type (functions, data, TLS) in `.symtab` and
    /// `.dynsym` whose name `wanted` accepts: (name, address, size), as the
    /// tables list them (a symbol in both comes twice). A damaged table gives
    /// none.
    pub fn symbols_where(&self, wanted: impl Fn(&[u8]) -> bool) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        let Ok(h) = self.headers() else { return out };
        for sh_type in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
            let Some((index, section)) = h
                .sections
                .enumerate()
                .find(|(_, s)| s.sh_type(h.endian) == sh_type)
            else {
                continue;
            };
            if self
                .check_range(
                    "symbol table",
                    section.sh_offset(h.endian),
                    section.sh_size(h.endian),
                    self.limits.max_section_bytes,
                )
                .is_err()
            {
                continue;
            }
            let Ok(table) = object::read::elf::SymbolTable::parse(
                h.endian,
                &self.data,
                &h.sections,
                index,
                section,
            ) else {
                continue;
            };
            let Some(mut names) = Names::of(self, &h, section) else {
                continue;
            };
            for sym in table.iter() {
                if sym.st_shndx(h.endian) == elf::SHN_UNDEF || sym.st_name(h.endian) == 0 {
                    continue;
                }
                let Some(name) = names.name(sym.st_name(h.endian)) else {
                    continue;
                };
                if wanted(name) {
                    out.push((
                        String::from_utf8_lossy(name).into_owned(),
                        sym.st_value(h.endian),
                        sym.st_size(h.endian),
                    ));
                }
            }
        }
        out
    }

    /// Names the symbolizer does not give: see [`NameTables`]. Only the
    /// names of functions that share an address are read.
    pub fn name_tables(&self) -> NameTables {
        let mut t = NameTables::default();
        let Ok(h) = self.headers() else { return t };
        let mut syms = Vec::new();
        let mut names = [
            self.function_syms(&h, elf::SHT_SYMTAB, 0, &mut syms),
            self.function_syms(&h, elf::SHT_DYNSYM, 1, &mut syms),
        ];
        syms.sort_unstable_by_key(|s| s.addr);
        // Aliases: several function symbols at one address (a function
        // exported is in both tables, under one name: no alias).
        let mut group: Vec<(String, u8)> = Vec::new();
        for run in syms.chunk_by(|a, b| a.addr == b.addr) {
            if run.len() < 2 {
                continue;
            }
            group.clear();
            for s in run {
                if let Some(name) = names[usize::from(s.table)]
                    .as_mut()
                    .and_then(|n| n.name(s.name))
                    .filter(|n| !n.is_empty())
                {
                    group.push((String::from_utf8_lossy(name).into_owned(), s.rank));
                }
            }
            group.sort();
            group.dedup();
            if group.len() > 1 {
                let best = group
                    .drain(..)
                    .min_by(public_name_order)
                    .expect("non-empty");
                t.aliases
                    .insert(run[0].addr, demangle(&best.0).into_boxed_str());
            }
        }
        t.plt = self.plt_entries(&h);
        t
    }

    /// PLT stubs and the functions they jump to, found by decoding each
    /// stub's `jmp *slot(%rip)` and matching the slot with the dynamic
    /// relocations, as perf's PLT synthesis does (x86_64).
    fn plt_entries(&self, h: &Headers<'_, 'f>) -> Vec<(u64, u64, Box<str>)> {
        if h.header.e_machine.get(h.endian) != elf::EM_X86_64 {
            return Vec::new();
        }
        // GOT slot address -> symbol, from .rela.plt and .rela.dyn; the
        // names of the symbols a stub jumps through are read, no others.
        let Some((index, section)) = h
            .sections
            .enumerate()
            .find(|(_, s)| s.sh_type(h.endian) == elf::SHT_DYNSYM)
        else {
            return Vec::new();
        };
        let Ok(dynsym) = object::read::elf::SymbolTable::parse(
            h.endian,
            &self.data,
            &h.sections,
            index,
            section,
        ) else {
            return Vec::new();
        };
        let Some(mut names) = Names::of(self, h, section) else {
            return Vec::new();
        };
        let dynsym = dynsym.symbols();
        let mut slots: FxHashMap<u64, usize> = FxHashMap::default();
        for rela in [".rela.plt", ".rela.dyn"] {
            let Ok(Some((_, bytes))) = self.section_data(rela) else {
                continue;
            };
            for r in bytes.chunks_exact(24) {
                let offset = u64::from_le_bytes(r[0..8].try_into().expect("8 bytes"));
                let info = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
                let (sym, kind) = ((info >> 32) as usize, info as u32);
                if (kind == elf::R_X86_64_JUMP_SLOT.0 || kind == elf::R_X86_64_GLOB_DAT.0)
                    && sym != 0
                    && sym < dynsym.len()
                {
                    slots.insert(offset, sym);
                }
            }
        }
        let mut out = Vec::new();
        for plt in [".plt", ".plt.sec", ".plt.got"] {
            let Ok(Some((info, code))) = self.section_data(plt) else {
                continue;
            };
            for (i, stub) in code.chunks(16).enumerate() {
                let at = info.addr + i as u64 * 16;
                let Some(slot) = stub_slot(stub, at) else {
                    continue;
                };
                let Some(&sym) = slots.get(&slot) else {
                    continue;
                };
                if let Some(name) = names
                    .name(dynsym[sym].st_name(h.endian))
                    .filter(|n| !n.is_empty())
                {
                    out.push((
                        at,
                        at + 16,
                        format!("{}@plt", String::from_utf8_lossy(name)).into_boxed_str(),
                    ));
                }
            }
        }
        out.sort_by_key(|e| e.0);
        out
    }
}

/// The GOT slot a 16-byte x86_64 PLT stub at `at` jumps through: an
/// optional `endbr64`, an optional `bnd` prefix, then `jmp *disp32(%rip)`.
fn stub_slot(stub: &[u8], at: u64) -> Option<u64> {
    let mut i = 0;
    if stub.get(0..4) == Some(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i = 4;
    }
    if stub.get(i) == Some(&0xf2) {
        i += 1;
    }
    if stub.get(i..i + 2) != Some(&[0xff, 0x25]) {
        return None;
    }
    let disp = i32::from_le_bytes(stub.get(i + 2..i + 6)?.try_into().ok()?);
    Some((at + i as u64 + 6).wrapping_add(disp as i64 as u64))
}

/// Lower is better: global before weak before local, default visibility first.
fn alias_rank(bind: elf::SymbolBind, visibility: elf::SymbolVisibility) -> u8 {
    let b = match bind {
        elf::STB_GLOBAL => 0,
        elf::STB_WEAK => 1,
        _ => 2,
    };
    b * 2 + u8::from(visibility != elf::STV_DEFAULT)
}

/// A symbol's name as the symbolizer shows names: Rust's without its hash,
/// C++'s with its parameters, others as they are (blazesym demangles with
/// the same two crates, so an alias compares equal to its name). An alias
/// left mangled showed in profiles as `_ZN7sysprof8sideband8Sideband5drain17h…E`.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Some(cpp) = cpp_demangle::Symbol::new(name)
            .ok()
            .and_then(|s| s.demangle().ok())
        {
            return cpp;
        }
    }
    name.to_string()
}

/// The order in which aliases are preferred, as perf chooses: by binding
/// and visibility, then fewer leading underscores (`malloc` over
/// `__libc_malloc` over `__GI___libc_malloc`), then the shorter name.
fn public_name_order(a: &(String, u8), b: &(String, u8)) -> std::cmp::Ordering {
    let underscores = |s: &str| {
        s.bytes().take_while(|&c| c == b'_').count() + if s.contains("__GI_") { 4 } else { 0 }
    };
    (a.1, underscores(&a.0), a.0.len(), &a.0).cmp(&(b.1, underscores(&b.0), b.0.len(), &b.0))
}

/// Names from a binary's own tables.
#[derive(Debug, Default, Clone)]
pub struct NameTables {
    /// Address -> the public name, where several function symbols share it.
    pub aliases: FxHashMap<u64, Box<str>>,
    /// PLT stubs: (start, end, "name@plt"), sorted.
    pub plt: Vec<(u64, u64, Box<str>)>,
}

impl NameTables {
    /// The PLT stub containing `addr`.
    pub fn plt_at(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.plt.partition_point(|e| e.0 <= addr).checked_sub(1)?;
        let (start, end, name) = &self.plt[i];
        (addr < *end).then_some((*start, &**name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the stub decoding of the three x86_64 PLT layouts: classic
    /// `.plt` entries, `.plt.sec` with endbr64 and bnd, and PLT0 (no slot).
    #[test]
    fn decodes_plt_stubs() {
        // jmp *0x2fe2(%rip) at 0x1030: next instruction 0x1036.
        let classic = [
            0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0xe9, 0xe0, 0xff,
            0xff, 0xff,
        ];
        assert_eq!(stub_slot(&classic, 0x1030), Some(0x1036 + 0x2fe2));
        // endbr64; bnd jmp *0x2fd5(%rip) at 0x1060: next instruction 0x106b.
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xd5, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x44,
            0x00, 0x00,
        ];
        assert_eq!(stub_slot(&sec, 0x1060), Some(0x106b + 0x2fd5));
        // PLT0: push GOT+8; jmp *GOT+16 — begins with ff 35: not a stub.
        let plt0 = [
            0xff, 0x35, 0x9a, 0x2f, 0x00, 0x00, 0xff, 0x25, 0x9c, 0x2f, 0x00, 0x00, 0x0f, 0x1f,
            0x40, 0x00,
        ];
        assert_eq!(stub_slot(&plt0, 0x1020), None);
        assert_eq!(stub_slot(&[0xff], 0), None, "a cut stub is no stub");
    }

    /// Check that the public name wins among aliases, as perf picks it.
    #[test]
    fn prefers_public_names() {
        let pick = |names: &[(&str, u8)]| {
            let v: Vec<(String, u8)> = names.iter().map(|(n, r)| (n.to_string(), *r)).collect();
            v.into_iter().min_by(public_name_order).unwrap().0
        };
        let global = alias_rank(elf::STB_GLOBAL, elf::STV_DEFAULT);
        let local = alias_rank(elf::STB_LOCAL, elf::STV_DEFAULT);
        let hidden = alias_rank(elf::STB_GLOBAL, elf::STV_HIDDEN);
        assert_eq!(
            pick(&[
                ("__GI___libc_malloc", local),
                ("__libc_malloc", global),
                ("malloc", global)
            ]),
            "malloc"
        );
        assert_eq!(
            pick(&[
                ("___pthread_mutex_lock", local),
                ("pthread_mutex_lock", global)
            ]),
            "pthread_mutex_lock"
        );
        assert_eq!(
            pick(&[
                ("internal_hot", hidden),
                ("hot", local),
                ("hot_public", global)
            ]),
            "hot_public"
        );
    }

    /// Check that names are read one at a time as the tables say: cut at
    /// the limit without reading on, none when the strings end without a
    /// NUL or the offset is past them.
    #[test]
    fn names_are_read_within_their_section_and_the_limit() {
        let dir = std::env::temp_dir().join(format!("sysprof-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("strings");
        fn over(file: &File, end: u64, whole_max: u64) -> Names<'_> {
            Names {
                file,
                start: 0,
                end,
                max_len: 1024,
                buf: Vec::new(),
                window_at: 0,
                window_len: 0,
                read_whole: false,
                whole_max,
            }
        }
        // Through the window (0), and read whole.
        for whole_max in [0, NAMES_WHOLE_MAX] {
            let mut bytes = b"\0short\0".to_vec();
            bytes.extend(std::iter::repeat_n(b'x', 5000));
            bytes.extend(b"\0unterminated");
            std::fs::write(&path, &bytes).unwrap();
            let file = File::open(&path).unwrap();
            let mut names = over(&file, bytes.len() as u64, whole_max);
            assert_eq!(names.name(1), Some(&b"short"[..]));
            assert_eq!(names.name(0), Some(&b""[..]));
            assert_eq!(
                names.name(7).map(<[u8]>::len),
                Some(1024),
                "a long name is cut at the limit"
            );
            assert_eq!(
                names.name(3),
                Some(&b"ort"[..]),
                "a name may start inside another (string tables share tails)"
            );
            assert_eq!(names.name(5008), None, "no NUL before the section's end");
            assert_eq!(names.name(bytes.len() as u32), None, "past the section");
            // Names across the window's end, and before the window, are whole.
            let mut long = vec![b'a'; NAMES_WINDOW - 4];
            long[0] = 0;
            long[100..106].copy_from_slice(b"first\0");
            long.extend(b"across\0after\0");
            std::fs::write(&path, &long).unwrap();
            let file = File::open(&path).unwrap();
            let mut names = over(&file, long.len() as u64, whole_max);
            assert_eq!(names.name(100), Some(&b"first"[..]));
            // Read whole, the section is read once: emptied now, the file
            // still gives every name through the open descriptor's buffer.
            if whole_max > 0 {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
                // Before the first name read: a window would read it again.
                assert_eq!(names.name(0), Some(&b""[..]), "served from the whole read");
            }
            let across = (NAMES_WINDOW - 4) as u32;
            assert_eq!(names.name(across), Some(&b"across"[..]), "{whole_max}");
            assert_eq!(names.name(across + 7), Some(&b"after"[..]));
            assert_eq!(names.name(100), Some(&b"first"[..]));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Check libc's tables as perf names them: `malloc` is the public name
    /// of its aliases, and its PLT stubs are named after their targets.
    #[test]
    fn libc_aliases_and_plt_stubs_are_named() {
        let Ok(file) = File::open("/usr/lib/x86_64-linux-gnu/libc.so.6") else {
            eprintln!("SKIPPED libc_aliases_and_plt_stubs_are_named: no /usr/lib/x86_64-linux-gnu/libc.so.6");
            return;
        };
        let t = ElfReader::new(&file, super::super::ElfLimits::default()).name_tables();
        assert!(
            t.aliases.values().any(|n| &**n == "malloc"),
            "malloc among {} aliases",
            t.aliases.len()
        );
        assert!(
            !t.aliases.values().any(|n| n.starts_with("__GI_")),
            "internal names lose to public ones"
        );
        assert!(
            !t.plt.is_empty()
                && t.plt
                    .iter()
                    .all(|p| p.2.ends_with("@plt") && p.1 == p.0 + 16),
            "{:?}",
            &t.plt[..t.plt.len().min(5)]
        );
    }

    /// Check that an alias is named as the symbolizer names functions.
    #[test]
    fn aliases_are_demangled() {
        assert_eq!(
            demangle("_ZN7sysprof8sideband8Sideband5drain17h02f2fe9b92fa7918E"),
            "sysprof::sideband::Sideband::drain"
        );
        assert_eq!(
            demangle("_ZN11FileMapInfo33relocate_pointers_in_core_regionsEl"),
            "FileMapInfo::relocate_pointers_in_core_regions(long)"
        );
        assert_eq!(demangle("malloc"), "malloc");
        assert_eq!(
            demangle("_Zbroken"),
            "_Zbroken",
            "what does not demangle stays as it is"
        );
    }
}
