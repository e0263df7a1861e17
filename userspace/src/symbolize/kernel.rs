//! Kernel symbols: a snapshot taken while our BPF programs are loaded, and
//! what it tells about kernel frames.
//!
//! In: the text symbols of the kernel and its modules, from `/proc/kallsyms`
//! or from the file a recording of this boot kept of them
//! ([`super::kernel_cache`]), and the JIT-compiled functions of the loaded
//! BPF programs, asked of the kernel ([`crate::bpf::jited`]; from kallsyms
//! where they cannot be). Out: a [`KernelSymbols`] table that names kernel
//! addresses, and classifies frames: the tracing path and BPF programs
//! (which every stack read inside a tracepoint starts with, and which are
//! cut: a thread's stack ends where the thread was), and interrupt entries
//! (a wakeup under one came from an interrupt, not from the task it
//! interrupted).
//!
//! Written here rather than through blazesym's kallsyms source because the
//! table must be taken while our programs are loaded (taken later, an
//! address in a BPF program takes the name of whatever symbol precedes it
//! once the program is gone) and the same table classifies frames while
//! recording. kallsyms' format is one `ADDRESS TYPE NAME [MODULE]` line per
//! symbol.

/// What a kernel frame is, for cutting and classifying stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// Ordinary kernel code.
    Code,
    /// The tracepoint and BPF dispatch path, or a BPF program.
    Tracing,
    /// A hardware interrupt's entry (the interrupted context lies below it).
    HardIrqEntry,
    /// Softirq processing (on interrupt exit, or on `local_bh_enable`).
    Softirq,
    /// The ksoftirqd thread's loop: softirqs processed in a task.
    Ksoftirqd,
}

/// Prefixes of the functions on the path from a tracepoint to a BPF program.
const TRACING_PREFIXES: [&str; 12] = [
    "bpf_prog_",
    "bpf_trace_run",
    "__bpf_trace_",
    "__traceiter_",
    "trace_call_bpf",
    "perf_trace_",
    "__bpf_prog_run",
    "bpf_dispatcher_",
    "bpf_trampoline_",
    "trace_event_raw_event_",
    "__perf_event_overflow",
    "perf_tp_event",
];

/// Interrupt entries on x86_64 (`asm_*` stubs and their C handlers) and arm64.
const HARDIRQ_PREFIXES: [&str; 9] = [
    "asm_common_interrupt",
    "asm_sysvec_",
    "common_interrupt",
    "sysvec_",
    "asm_spurious_interrupt",
    "el1_interrupt",
    "el0_interrupt",
    "el1h_64_irq",
    "el0t_64_irq",
];

/// Why the kernel's symbols could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    /// `/proc/kallsyms` could not be read.
    #[error("/proc/kallsyms: {0}")]
    Read(#[source] std::io::Error),
    /// It could, but `kptr_restrict` hides every address from us.
    #[error(
        "/proc/kallsyms shows no addresses: run as root or grant CAP_SYSLOG (kernel.kptr_restrict)"
    )]
    Hidden,
}

/// A snapshot of the kernel's symbol table.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Symbol start addresses, sorted.
    starts: Vec<u64>,
    /// Each symbol's name: (offset, length) in `names`.
    name_spans: Vec<(u32, u32)>,
    names: String,
    /// The symbols that are not plain code, as (start, end, class), sorted:
    /// a few thousand, so classifying a frame (every frame of every stack
    /// record) searches a small table that stays in cache, not all of them.
    special: Vec<(u64, u64, FrameClass)>,
    /// `_text`: kernel frames are given relative to it.
    pub text: u64,
}

/// A kernel address's symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    /// Where the symbol starts.
    pub start: u64,
    /// Its size, up to the next symbol (None for the last one).
    pub size: Option<u64>,
    /// Its name.
    pub name: &'a str,
}

/// What a kernel function is, by its name.
fn class_of(name: &str) -> FrameClass {
    // Only names that begin as some prefix does are compared with them: all
    // 21 compared for each of a kernel's 120,000 symbols took 7.5 ms of the
    // 38 ms reading them took, the kernel formatting them most of the rest;
    // 2 ms now (`sysprof-benches --micro`, a build without LTO).
    let Some(&first) = name.as_bytes().first() else {
        return FrameClass::Code;
    };
    let begins = |prefixes: &[&str]| {
        prefixes
            .iter()
            .any(|p| p.as_bytes()[0] == first && name.starts_with(p))
    };
    if !FIRST_BYTES[first as usize] {
        FrameClass::Code
    } else if begins(&TRACING_PREFIXES) {
        FrameClass::Tracing
    } else if begins(&HARDIRQ_PREFIXES) {
        FrameClass::HardIrqEntry
    } else if SOFTIRQ_FUNCTIONS.contains(&name) {
        FrameClass::Softirq
    } else if name == KSOFTIRQD_LOOP {
        FrameClass::Ksoftirqd
    } else {
        FrameClass::Code
    }
}

/// Softirq processing's functions (on interrupt exit, or on `local_bh_enable`).
const SOFTIRQ_FUNCTIONS: [&str; 3] = ["handle_softirqs", "__do_softirq", "do_softirq"];

/// The ksoftirqd thread's loop.
const KSOFTIRQD_LOOP: &str = "run_ksoftirqd";

/// The bytes a name of some class other than code can begin with, from
/// the names and prefixes above.
const FIRST_BYTES: [bool; 256] = {
    let set = with_first_bytes([false; 256], &TRACING_PREFIXES);
    let set = with_first_bytes(set, &HARDIRQ_PREFIXES);
    let set = with_first_bytes(set, &SOFTIRQ_FUNCTIONS);
    with_first_bytes(set, &[KSOFTIRQD_LOOP])
};

/// `set` with the first byte of each of `names` in it.
const fn with_first_bytes(mut set: [bool; 256], names: &[&str]) -> [bool; 256] {
    let mut i = 0;
    while i < names.len() {
        set[names[i].as_bytes()[0] as usize] = true;
        i += 1;
    }
    set
}

/// Where a symbol lives: for a kallsyms line, by its module field; a BPF
/// function listed by the kernel is [`SymbolHome::Bpf`], and the end after
/// it [`SymbolHome::End`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SymbolHome {
    /// The kernel itself, or a module: fixed while the module list is.
    Fixed,
    /// A BPF program (`[bpf]`): comes and goes.
    Bpf,
    /// Code the kernel makes at run time (`[__builtin__ftrace]`,
    /// `[__builtin__kprobes]`): comes and goes.
    Made,
    /// Not a symbol: the end of the one before it (its name is empty).
    End,
}

/// A kallsyms line's text symbol (types t, T, w, W) at a nonzero address:
/// its address, its name, and where it lives. None for any other line, and
/// for one that is not `ADDRESS TYPE NAME [MODULE]`: a name that is not
/// UTF-8 included.
fn text_symbol(line: &[u8]) -> Option<(u64, &str, SymbolHome)> {
    let mut fields = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let (addr, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
    if !matches!(kind, b"t" | b"T" | b"w" | b"W") || addr.len() > 16 {
        return None;
    }
    let mut value = 0u64;
    for &digit in addr {
        value = value << 4 | char::from(digit).to_digit(16)? as u64;
    }
    if value == 0 {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?;
    let home = match fields.next() {
        Some(b"[bpf]") => SymbolHome::Bpf,
        Some(m) if m.starts_with(b"[__builtin__") => SymbolHome::Made,
        _ => SymbolHome::Fixed,
    };
    Some((value, name, home))
}

/// Symbols as read, before they are sorted into a table: what the cache
/// of the kernel's own symbols keeps (`kernel_cache`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SymbolList {
    /// (start, name's offset in `names`, its length, where it lives). A
    /// length of 0 is no symbol: the end of the one before it.
    pub entries: Vec<(u64, u32, u32, SymbolHome)>,
    pub names: String,
    /// `_text`'s address.
    pub text: u64,
}

impl SymbolList {
    /// Add a symbol; false (and nothing added) once the names outgrow
    /// their `u32` offsets.
    pub fn push(&mut self, addr: u64, name: &str, home: SymbolHome) -> bool {
        let Ok(offset) = u32::try_from(self.names.len()) else {
            return false;
        };
        if u32::try_from(self.names.len() + name.len()).is_err() {
            return false;
        }
        self.entries.push((addr, offset, name.len() as u32, home));
        self.names.push_str(name);
        true
    }

    /// Add the end of the symbol before `addr`: from it, no symbol.
    pub fn push_end(&mut self, addr: u64) {
        self.entries.push((addr, 0, 0, SymbolHome::End));
    }

    /// Only the symbols fixed while the module list is (see [`SymbolHome`]).
    pub fn fixed(&self) -> SymbolList {
        let mut out = SymbolList {
            text: self.text,
            ..Default::default()
        };
        for &(addr, offset, len, home) in &self.entries {
            if home == SymbolHome::Fixed && len > 0 {
                let name = &self.names[offset as usize..(offset + len) as usize];
                out.push(addr, name, home);
            }
        }
        out
    }

    /// Add each BPF program's functions, each with its end.
    pub fn add_bpf(&mut self, functions: &[crate::bpf::jited::JitedFunction]) {
        for f in functions {
            if self.push(f.start, &f.name, SymbolHome::Bpf) {
                self.push_end(f.start.saturating_add(f.len as u64));
            }
        }
    }
}

impl KernelSymbols {
    /// The kernel's symbols now, our BPF programs' included. The kernel's
    /// and its modules' come from the file a recording of this boot kept
    /// (`kernel_cache`), or from `/proc/kallsyms`, which the file is then
    /// made from; the BPF programs' functions from the kernel
    /// (`bpf::jited`), so that every recording names them alike. Where
    /// the programs cannot be listed, everything comes from kallsyms.
    /// Without kallsyms (or with addresses hidden by `kptr_restrict`) the
    /// table is empty and kernel frames stay unnamed.
    pub fn snapshot() -> Result<KernelSymbols, KallsymsError> {
        // Without the programs' functions, kallsyms has them: nothing kept
        // is of use.
        let Ok(programs) = crate::bpf::jited::loaded_jited_functions() else {
            return KernelSymbols::read_kallsyms();
        };
        let dir = super::kernel_cache::cache_dir();
        let key = dir
            .as_ref()
            .and_then(|_| super::kernel_cache::current_key());
        if let (Some(dir), Some(key)) = (&dir, &key) {
            if let Some(mut kept) = super::kernel_cache::load(dir, key) {
                kept.add_bpf(&programs);
                return Ok(KernelSymbols::from_list(kept));
            }
        }
        let mut fixed = KernelSymbols::read_kallsyms_list()?.fixed();
        // Kept only if the module list is the same after the read (else the
        // file could hold a module's symbols under a list without it).
        if let (Some(dir), Some(key)) = (&dir, &key) {
            if super::kernel_cache::current_key().as_ref() == Some(key) {
                // A cache that cannot be written costs the next recording a read, nothing more.
                let _ = super::kernel_cache::store(dir, key, &fixed);
            }
        }
        fixed.add_bpf(&programs);
        Ok(KernelSymbols::from_list(fixed))
    }

    /// Read `/proc/kallsyms` now, kept nowhere (see [`KernelSymbols::snapshot`]).
    pub fn read_kallsyms() -> Result<KernelSymbols, KallsymsError> {
        Ok(KernelSymbols::from_list(
            KernelSymbols::read_kallsyms_list()?
        ))
    }

    fn read_kallsyms_list() -> Result<SymbolList, KallsymsError> {
        // Read line by line: the whole text (8 MB here) held beside the
        // rings' start-up hand-over was a third of `record`'s peak heap
        // (heaptrack beside pgbench).
        let file = std::fs::File::open("/proc/kallsyms").map_err(KallsymsError::Read)?;
        let list = read_list(std::io::BufReader::with_capacity(64 << 10, file))
            .map_err(KallsymsError::Read)?;
        if list.entries.is_empty() {
            return Err(KallsymsError::Hidden);
        }
        Ok(list)
    }

    /// Parse kallsyms text: text symbols only (types t, T, w, W), sorted.
    pub fn parse(text: &str) -> KernelSymbols {
        KernelSymbols::read(text.as_bytes()).expect("reading a string cannot fail")
    }

    /// [`KernelSymbols::parse`], reading `input` a line at a time.
    fn read(input: impl std::io::BufRead) -> std::io::Result<KernelSymbols> {
        Ok(KernelSymbols::from_list(read_list(input)?))
    }

    /// The table of `list`'s symbols, sorted.
    pub(crate) fn from_list(list: SymbolList) -> KernelSymbols {
        let SymbolList {
            mut entries,
            mut names,
            text,
        } = list;
        // At one address, an end first: the symbol that starts there is
        // the one found (a BPF program's pack puts one right after another).
        entries.sort_by_key(|e| (e.0, e.2 > 0));
        // Exact sizes: grown by doubling, the names and their spans held
        // up to twice their bytes for the whole recording (heaptrack: 7.8 MB
        // for 4 MB of symbols).
        names.shrink_to_fit();
        let mut t = KernelSymbols {
            text,
            names,
            ..Default::default()
        };
        t.starts.reserve_exact(entries.len());
        t.name_spans.reserve_exact(entries.len());
        for (i, &(addr, offset, len, home)) in entries.iter().enumerate() {
            let end = entries.get(i + 1).map_or(u64::MAX, |e| e.0);
            let name = &t.names[offset as usize..(offset + len) as usize];
            let class = if len == 0 {
                FrameClass::Code
            } else if home == SymbolHome::Bpf {
                FrameClass::Tracing
            } else {
                class_of(name)
            };
            t.starts.push(addr);
            t.name_spans.push((offset, len));
            if class != FrameClass::Code {
                t.special.push((addr, end, class));
            }
        }
        t
    }

    fn index(&self, addr: u64) -> Option<usize> {
        self.starts.partition_point(|&s| s <= addr).checked_sub(1)
    }

    /// The symbol containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let i = self.index(addr)?;
        let (off, len) = self.name_spans[i];
        if len == 0 {
            // Past a symbol's known end.
            return None;
        }
        Some(KernelSymbol {
            start: self.starts[i],
            size: self.starts.get(i + 1).map(|next| next - self.starts[i]),
            name: &self.names[off as usize..(off + len) as usize],
        })
    }

    /// What the frame at `addr` is.
    pub fn class(&self, addr: u64) -> FrameClass {
        let i = self.special.partition_point(|e| e.0 <= addr);
        match i.checked_sub(1).map(|i| self.special[i]) {
            Some((_, end, class)) if addr < end => class,
            _ => FrameClass::Code,
        }
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// True when no symbol was read.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// A kernel stack read inside a tracepoint (leaf first), without the
    /// tracing path and BPF program frames it starts with.
    pub fn cut_tracing<'a>(&self, stack: &'a [u64]) -> &'a [u64] {
        let skip = stack
            .iter()
            .take_while(|&&a| self.class(a) == FrameClass::Tracing)
            .count();
        &stack[skip..]
    }

    /// Where a stack (leaf first, tracing path already cut) ran: in an
    /// interrupt, the frames from the leaf up to the interrupt's entry,
    /// which is all of it that belongs to the interrupt; None in a task.
    pub fn interrupt_part(&self, stack: &[u64]) -> Option<(InterruptKind, usize)> {
        for (i, &a) in stack.iter().enumerate() {
            match self.class(a) {
                FrameClass::HardIrqEntry => {
                    // The entry may be several frames (C handler, asm stub): keep them all.
                    let end = i + stack[i..]
                        .iter()
                        .take_while(|&&a| self.class(a) == FrameClass::HardIrqEntry)
                        .count();
                    return Some((InterruptKind::Hard, end));
                }
                FrameClass::Softirq => {
                    // Below the softirq frames: the interrupt's exit, local_bh_enable,
                    // or ksoftirqd's loop. In ksoftirqd the softirq still ended
                    // the wait (a block completion, a packet): the thread only
                    // carried it, as an interrupt's exit does when softirqs pile
                    // up (CI, beside a loaded host: half of 300 O_DIRECT reads
                    // were completed there, and were charged to ksoftirqd's
                    // running instead of the device).
                    let rest = &stack[i..];
                    if let Some(j) = rest
                        .iter()
                        .position(|&a| self.class(a) == FrameClass::HardIrqEntry)
                    {
                        let end = i
                            + j
                            + rest[j..]
                                .iter()
                                .take_while(|&&a| self.class(a) == FrameClass::HardIrqEntry)
                                .count();
                        return Some((InterruptKind::Soft, end));
                    }
                    let end = i + rest
                        .iter()
                        .take_while(|&&a| self.class(a) == FrameClass::Softirq)
                        .count();
                    return Some((InterruptKind::Soft, end));
                }
                FrameClass::Ksoftirqd => return None,
                _ => {}
            }
        }
        None
    }
}

/// kallsyms text's text symbols (types t, T, w, W), in the order read.
pub(crate) fn read_list(mut input: impl std::io::BufRead) -> std::io::Result<SymbolList> {
    let mut list = SymbolList::default();
    // Lines as bytes: only a kept symbol's name needs to be text.
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let Some((addr, name, home)) = text_symbol(&line) else {
            continue;
        };
        if name == "_text" {
            list.text = addr;
        }
        if !list.push(addr, name, home) {
            break;
        }
    }
    Ok(list)
}

pub use crate::model::recording::InterruptKind;

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000d40 T asm_common_interrupt
ffffffff81000df0 T asm_sysvec_apic_timer_interrupt
ffffffff81100000 t try_to_wake_up
ffffffff81100400 T __schedule
ffffffff81100900 T schedule
ffffffff81200000 t handle_softirqs
ffffffff81200300 t run_ksoftirqd
ffffffff81200400 T do_softirq
ffffffff81300000 T __traceiter_sched_switch
ffffffff81300100 T bpf_trace_run4
ffffffff81400000 D some_data
ffffffff81500000 T common_interrupt
ffffffff81600000 T blk_mq_complete_request
ffffffff81700000 T __local_bh_enable_ip
ffffffffc0001000 t bpf_prog_6deef7357e7b4530_on_sched_switch\t[bpf]
ffffffffc0002000 t bpf_prog_1122334455667788_sample_cpu_clock\t[bpf]
ffffffffc0100000 t ext4_readdir\t[ext4]
";

    /// Check that every prefix and name classifies as its class, past the
    /// first-byte filter, and that others are code.
    #[test]
    fn classifies_every_listed_name() {
        for p in TRACING_PREFIXES {
            assert_eq!(class_of(&format!("{p}x")), FrameClass::Tracing, "{p}");
        }
        for p in HARDIRQ_PREFIXES {
            assert_eq!(class_of(&format!("{p}x")), FrameClass::HardIrqEntry, "{p}");
        }
        for name in SOFTIRQ_FUNCTIONS {
            assert_eq!(class_of(name), FrameClass::Softirq, "{name}");
        }
        assert_eq!(class_of(KSOFTIRQD_LOOP), FrameClass::Ksoftirqd);
        for name in [
            "",
            "schedule",
            "bpf_map_lookup_elem",
            "do_softirq_own_stack",
            "_text",
        ] {
            assert_eq!(class_of(name), FrameClass::Code, "{name}");
        }
    }

    /// Check each kind of line: text symbols (with and without a module,
    /// a BPF program's), and lines that name no text symbol: data, a zero
    /// or malformed address, missing fields, a name that is not UTF-8.
    #[test]
    fn reads_text_symbols_from_lines() {
        // (line, (address, name, where it lives))
        type Kept<'a> = (&'a [u8], (u64, &'a str, SymbolHome));
        let kept: [Kept; 5] = [
            (
                b"ffffffff81100400 T __schedule\n",
                (0xffffffff81100400, "__schedule", SymbolHome::Fixed),
            ),
            (
                b"ffffffffc0100000 t ext4_readdir\t[ext4]\n",
                (0xffffffffc0100000, "ext4_readdir", SymbolHome::Fixed),
            ),
            (
                b"ffffffffc0001000 t bpf_prog_6deef7357e7b4530_x\t[bpf]",
                (
                    0xffffffffc0001000,
                    "bpf_prog_6deef7357e7b4530_x",
                    SymbolHome::Bpf,
                ),
            ),
            (
                b"ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n",
                (0xffffffffc0201000, "ftrace_trampoline", SymbolHome::Made),
            ),
            (
                b"ffffffff8100000a W weak_one",
                (0xffffffff8100000a, "weak_one", SymbolHome::Fixed),
            ),
        ];
        for (line, symbol) in kept {
            assert_eq!(
                text_symbol(line),
                Some(symbol),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        for line in [
            &b"ffffffff81400000 D some_data\n"[..],
            b"0000000000000000 T hidden_by_kptr_restrict",
            b"ffffffff8110040g T not_hex",
            b"1ffffffff81100400 T seventeen_digits",
            b"+fffffff81100400 T signed",
            b"ffffffff81100400 T",
            b"\n",
            b"ffffffff81100400 T bad_\xff_name",
        ] {
            assert_eq!(text_symbol(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    /// Check lookups, sizes up to the next symbol, data symbols ignored,
    /// and BPF programs named by their own entries (not their neighbours).
    #[test]
    fn names_addresses_including_bpf_programs() {
        let k = KernelSymbols::parse(KALLSYMS);
        assert_eq!(k.text, 0xffffffff81000000);
        let s = k.lookup(0xffffffff81100410).unwrap();
        assert_eq!(
            (s.name, s.start, s.size),
            ("__schedule", 0xffffffff81100400, Some(0x500))
        );
        assert_eq!(
            k.lookup(0xffffffff81400010).unwrap().name,
            "bpf_trace_run4",
            "data symbols are not code"
        );
        assert_eq!(
            k.lookup(0xffffffffc0001080).unwrap().name,
            "bpf_prog_6deef7357e7b4530_on_sched_switch"
        );
        assert_eq!(
            k.lookup(0xffffffffc0002080).unwrap().name,
            "bpf_prog_1122334455667788_sample_cpu_clock"
        );
        assert_eq!(k.lookup(0xffffffffc0100010).unwrap().name, "ext4_readdir");
        assert!(k.lookup(0x1000).is_none());
    }

    /// Check that a stack read in sched_switch loses the BPF program and the
    /// tracepoint path and starts at __schedule; a stack without them is kept.
    #[test]
    fn cuts_the_tracing_path() {
        let k = KernelSymbols::parse(KALLSYMS);
        let stack = [
            0xffffffffc0001010,
            0xffffffff81300110,
            0xffffffff81300010,
            0xffffffff81100410,
            0xffffffff81100910,
        ];
        assert_eq!(k.cut_tracing(&stack), &stack[3..]);
        assert_eq!(k.cut_tracing(&stack[3..]), &stack[3..]);
        assert_eq!(k.cut_tracing(&stack[..2]), &[] as &[u64]);
    }

    /// Check that wakeups under an interrupt entry or softirq processing
    /// (in ksoftirqd too) are told apart from wakeups by a task.
    #[test]
    fn tells_interrupts_from_tasks() {
        let k = KernelSymbols::parse(KALLSYMS);
        let (wake, blk, common, asm) = (
            0xffffffff81100010,
            0xffffffff81600010,
            0xffffffff81500010,
            0xffffffff81000d50,
        );
        let (softirq, ksoftirqd, do_softirq, bh) = (
            0xffffffff81200010,
            0xffffffff81200310,
            0xffffffff81200410,
            0xffffffff81700010,
        );
        let task_frame = 0xffffffff81100910;
        // A hard interrupt that interrupted a task in the kernel.
        assert_eq!(
            k.interrupt_part(&[wake, blk, common, asm, task_frame]),
            Some((InterruptKind::Hard, 4))
        );
        // Softirq on interrupt exit.
        assert_eq!(
            k.interrupt_part(&[wake, softirq, asm, task_frame]),
            Some((InterruptKind::Soft, 3))
        );
        // Softirq processed by a task re-enabling bottom halves.
        assert_eq!(
            k.interrupt_part(&[wake, softirq, do_softirq, bh, task_frame]),
            Some((InterruptKind::Soft, 3))
        );
        // Softirq processed in ksoftirqd: the softirq's frames, not the thread's loop.
        assert_eq!(
            k.interrupt_part(&[wake, softirq, ksoftirqd]),
            Some((InterruptKind::Soft, 2))
        );
        // A plain task.
        assert_eq!(k.interrupt_part(&[wake, task_frame]), None);
    }
}
