//! Unwind tables for the in-kernel unwinder, compiled from `.eh_frame`.
//!
//! In: a binary's `.eh_frame` (or, without one, `.debug_frame`) bytes and
//! the address the section is loaded at. Out: a [`Table`], one 8-byte
//! [`Row`] per address where the rule for finding the caller changes,
//! sorted by address, in the form `ebpf/unwind.bpf.h` walks: the CFA as the
//! stack or frame pointer plus an offset, the return address always at
//! CFA-8 (x86_64), the caller's frame pointer saved at CFA-8n or unchanged.
//! What a row cannot express gets a kind that says so (a PLT entry's CFA
//! expression has its own kind, a signal trampoline its own, any other DWARF
//! expression stops the walk with that reason), and the end of the stack
//! (`DW_CFA_undefined rip`, as `_start` and `clone3` mark it) is a row too.
//!
//! gimli parses the CFI (it evaluates the CIE and FDE programs into rows);
//! this module only maps each row onto the kernel's few cases, merges rows
//! that say the same, and marks the gaps between functions (no rule there:
//! the walker tries the frame pointer). Everything in a table is derived
//! from one file, so a table is built once per file and shared by every
//! process that maps it. The input is untrusted: gimli reports malformed
//! CFI as an error, and a table never holds more rows than its caller's
//! budget.

use gimli::{BaseAddresses, CfaRule, CieOrFde, RegisterRule, UnwindContext, UnwindSection};

pub use crate::bpf::abi::{
    Row, ROW_CFA_RBP, ROW_CFA_RSP, ROW_END, ROW_NONE, ROW_PLT, ROW_SIGNAL, ROW_UNSUPPORTED,
};

/// CFA offsets / 8 below this fit a row (21 bits: 16 MiB frames).
const MAX_CFA_OFF8: i64 = 1 << 21;

/// The `ROW_*` of a row's `kind` byte.
pub const ROW_KIND_MASK: u8 = 7;

/// A compiled table, sorted by `pc`.
#[derive(Debug, Default, Clone)]
pub struct Table {
    /// The rows, sorted by `pc`, one per address.
    pub rows: Vec<Row>,
    /// FDEs whose rules were (in part) marked unsupported, for the summary.
    pub unsupported_fdes: u32,
}

/// What to compile and where it lies in the file's address space.
pub struct CfiSection<'a> {
    /// The section's contents.
    pub bytes: &'a [u8],
    /// The section's address (`sh_addr`): pc-relative pointers in
    /// `.eh_frame` are relative to it.
    pub addr: u64,
    /// `.eh_frame` (true) or `.debug_frame`.
    pub is_eh_frame: bool,
}

const RSP: gimli::Register = gimli::X86_64::RSP;
const RBP: gimli::Register = gimli::X86_64::RBP;
const RA: gimli::Register = gimli::X86_64::RA;

/// Why a table could not be compiled (one line, after the binary's path).
#[derive(Debug, thiserror::Error)]
pub enum CfiError {
    /// More rows than a table may take, while reading its FDEs: the CFI
    /// is fine, only too large for the kernel (userspace walks it).
    #[error(
        "{section}: more than {max_rows} rows (a table may take a quarter of --unwind-table-mb)"
    )]
    TooManyRows {
        /// `.eh_frame` or `.debug_frame`.
        section: &'static str,
        /// The most rows allowed.
        max_rows: usize,
    },
    /// Code the 32-bit row addresses cannot reach.
    #[error("{section}: code above 4 GiB, which a table cannot address")]
    AddressOverflow {
        /// `.eh_frame` or `.debug_frame`.
        section: &'static str,
    },
    /// gimli could not read the section.
    #[error("{section}: {source}")]
    Damaged {
        /// `.eh_frame` or `.debug_frame`.
        section: &'static str,
        /// What gimli said.
        #[source]
        source: gimli::Error,
    },
    /// Not one FDE could be read.
    #[error("none of its {fdes} FDEs could be read (damaged CFI)")]
    NoReadableFde {
        /// FDEs that could not be read.
        fdes: u32,
    },
    /// More rows than the budget once merged.
    #[error("more than {max_rows} unwind rows (the table budget)")]
    OverBudget {
        /// The most rows allowed.
        max_rows: usize,
    },
    /// [`compile_file`]: the file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// [`compile_file`]: the file is no object file `object` can parse.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// What object said.
        #[source]
        source: object::Error,
    },
    /// [`compile_file`]: its CFI section's data could not be read.
    #[error("{0}")]
    SectionData(#[source] object::Error),
    /// [`compile_file`]: no CFI at all.
    #[error("no .eh_frame or .debug_frame")]
    NoCfi,
}

/// The rule of one FDE row over [start, end): 12 bytes, not a `(u32, u32,
/// Row)` of 16. librustc_driver's `.eh_frame` gives 1.15 million of them,
/// which as that tuple, grown by doubling, were a 50-MB moment of the
/// agent beside a `cargo build` (heaptrack).
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u32,
    end: u32,
    kind: u8,
    rbp_slot: u8,
    cfa_off8: u16,
}

impl Range {
    fn new(start: u32, end: u32, r: Row) -> Range {
        Range {
            start,
            end,
            kind: r.kind,
            rbp_slot: r.rbp_slot,
            cfa_off8: r.cfa_off8,
        }
    }

    fn row(&self) -> Row {
        Row {
            pc: self.start,
            kind: self.kind,
            rbp_slot: self.rbp_slot,
            cfa_off8: self.cfa_off8,
        }
    }
}

/// Bytes of CFI per row, at least: librustc_driver's and libLLVM's
/// `.eh_frame` hold 5.4 and 5.9 bytes a row, libc's 7.1. The ranges are
/// reserved for this many at once rather than grown by doubling.
const MIN_CFI_BYTES_PER_ROW: usize = 5;

/// Compile a section into a table of at most `max_rows` rows.
pub fn compile(section: &CfiSection, max_rows: usize) -> Result<Table, CfiError> {
    let mut ranges: Vec<Range> = Vec::with_capacity(
        (section.bytes.len() / MIN_CFI_BYTES_PER_ROW).min(max_rows.saturating_add(1)),
    );
    let mut unsupported_fdes = 0u32;
    let endian = gimli::LittleEndian;
    let result = if section.is_eh_frame {
        let eh = gimli::EhFrame::new(section.bytes, endian);
        let bases = BaseAddresses::default().set_eh_frame(section.addr);
        collect(&eh, &bases, &mut ranges, &mut unsupported_fdes, max_rows)
    } else {
        let mut df = gimli::DebugFrame::new(section.bytes, endian);
        df.set_address_size(8);
        collect(
            &df,
            &BaseAddresses::default(),
            &mut ranges,
            &mut unsupported_fdes,
            max_rows,
        )
    };
    let section_name = if section.is_eh_frame {
        ".eh_frame"
    } else {
        ".debug_frame"
    };
    let section = section_name;
    let damaged = result.map_err(|e| match e {
        gimli::Error::TooManyRegisterRules => CfiError::TooManyRows { section, max_rows },
        gimli::Error::AddressOverflow => CfiError::AddressOverflow { section },
        source => CfiError::Damaged { section, source },
    })?;
    if ranges.is_empty() && damaged > 0 {
        return Err(CfiError::NoReadableFde { fdes: damaged });
    }
    let rows = flatten(ranges, max_rows)?;
    Ok(Table {
        rows,
        unsupported_fdes,
    })
}

/// Every FDE row as (start, end, row).
fn collect<'a, S: UnwindSection<gimli::EndianSlice<'a, gimli::LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    ranges: &mut Vec<Range>,
    unsupported_fdes: &mut u32,
    max_rows: usize,
) -> gimli::Result<u32>
where
    S::Offset: gimli::UnwindOffset<usize>,
{
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    let mut damaged = 0u32;
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // One bad FDE costs its function, not the table.
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            damaged += 1;
            continue;
        };
        let signal = fde.is_signal_trampoline();
        let Ok(mut rows) = fde.rows(section, bases, &mut ctx) else {
            damaged += 1;
            continue;
        };
        let mut unsupported = false;
        loop {
            let row = match rows.next_row() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => break,
            };
            let r = if signal {
                Row {
                    pc: 0,
                    kind: ROW_SIGNAL,
                    rbp_slot: 0,
                    cfa_off8: 0,
                }
            } else {
                encode(row, section)
            };
            unsupported |= r.kind == ROW_UNSUPPORTED;
            if row.start_address() < row.end_address() {
                // Addresses past 4 GiB have no row (the kernel's are 32-bit):
                // the table says so when flattened.
                let start = u32::try_from(row.start_address())
                    .map_err(|_| gimli::Error::AddressOverflow)?;
                let end = u32::try_from(row.end_address()).unwrap_or(u32::MAX);
                ranges.push(Range::new(start, end, r));
            }
            // Memory is bounded by the budget, whatever the CFI claims.
            if ranges.len() > max_rows {
                return Err(gimli::Error::TooManyRegisterRules);
            }
        }
        *unsupported_fdes += unsupported as u32;
    }
    Ok(damaged)
}

/// One gimli row as the kernel's row (its `pc` is set by the caller).
fn encode<'a, S: UnwindSection<gimli::EndianSlice<'a, gimli::LittleEndian>>>(
    row: &gimli::UnwindTableRow<usize>,
    section: &S,
) -> Row {
    let unsupported = Row {
        pc: 0,
        kind: ROW_UNSUPPORTED,
        rbp_slot: 0,
        cfa_off8: 0,
    };
    match row.register(RA) {
        Some(RegisterRule::Undefined) => {
            return Row {
                pc: 0,
                kind: ROW_END,
                rbp_slot: 0,
                cfa_off8: 0,
            }
        }
        Some(RegisterRule::Offset(-8)) => {}
        _ => return unsupported,
    }
    let rbp_slot = match row.register(RBP) {
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => 0,
        Some(RegisterRule::Offset(o)) if o < 0 && o % 8 == 0 && -o / 8 <= u8::MAX as i64 => {
            (-o / 8) as u8
        }
        _ => return unsupported,
    };
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let kind = match *register {
                RSP => ROW_CFA_RSP,
                RBP => ROW_CFA_RBP,
                _ => return unsupported,
            };
            if *offset < 0 || offset % 8 != 0 || offset / 8 >= MAX_CFA_OFF8 {
                return unsupported;
            }
            let off8 = (offset / 8) as u32;
            Row {
                pc: 0,
                kind: kind | ((off8 >> 16) << 3) as u8,
                rbp_slot,
                cfa_off8: off8 as u16,
            }
        }
        CfaRule::Expression(expr) => match expr
            .get(section)
            .ok()
            .and_then(|e| plt_threshold(e.0.slice()))
        {
            Some(threshold) => Row {
                pc: 0,
                kind: ROW_PLT,
                rbp_slot: threshold,
                cfa_off8: 1,
            },
            None => unsupported,
        },
    }
}

/// The one CFA expression every x86_64 linker writes, for PLT entries:
/// `rsp + 8 + ((rip & 15) >= N) << 3`, whose N is returned.
fn plt_threshold(expr: &[u8]) -> Option<u8> {
    // DW_OP_breg7 8, DW_OP_breg16 0, DW_OP_lit15, DW_OP_and, DW_OP_litN,
    // DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus
    match expr {
        [0x77, 8, 0x80, 0, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22]
            if (0x30..=0x3f).contains(lit) =>
        {
            Some(lit - 0x30)
        }
        _ => None,
    }
}

/// Sort the ranges into rows: a row where each range starts, a `ROW_NONE`
/// where one ends without another starting there, rows equal to the one
/// before dropped. The rows are counted first and then written into a
/// vector of that size (two passes over sorted ranges cost little; a
/// vector grown by doubling holds up to twice its rows).
fn flatten(mut ranges: Vec<Range>, max_rows: usize) -> Result<Vec<Row>, CfiError> {
    ranges.sort_by_key(|r| r.start);
    let mut count = 0usize;
    let mut last: Option<Row> = None;
    walk(&ranges, |pc, r| {
        let row = Row { pc, ..r };
        match last {
            Some(l) if l.pc == pc => {}
            Some(l)
                if (l.kind, l.rbp_slot, l.cfa_off8) == (row.kind, row.rbp_slot, row.cfa_off8) =>
            {
                return Ok(())
            }
            _ => count += 1,
        }
        last = Some(row);
        if count > max_rows {
            return Err(CfiError::OverBudget { max_rows });
        }
        Ok(())
    })?;
    let mut rows: Vec<Row> = Vec::with_capacity(count);
    walk(&ranges, |pc, r| {
        let row = Row { pc, ..r };
        match rows.last_mut() {
            Some(last) if last.pc == pc => *last = row,
            Some(last)
                if (last.kind, last.rbp_slot, last.cfa_off8)
                    == (row.kind, row.rbp_slot, row.cfa_off8) => {}
            _ => rows.push(row),
        }
        Ok(())
    })?;
    Ok(rows)
}

/// Call `push(pc, row)` for each row the sorted `ranges` give, in order:
/// each range's rule at its start, and no rule (`ROW_NONE`) where coverage
/// ends before the next range starts.
fn walk(
    ranges: &[Range],
    mut push: impl FnMut(u32, Row) -> Result<(), CfiError>,
) -> Result<(), CfiError> {
    let mut covered_to = 0u32;
    for (i, range) in ranges.iter().enumerate() {
        push(range.start, range.row())?;
        covered_to = covered_to.max(range.end);
        let next_start = ranges.get(i + 1).map(|r| r.start);
        // Where coverage ends (even when an earlier, longer FDE ends it:
        // malformed overlaps), no rule until the next FDE.
        if next_start.is_none_or(|n| n > covered_to) {
            push(covered_to, Row::default())?;
        }
    }
    Ok(())
}

/// Compile the table of an ELF file on disk (for the benchmarks: the
/// profiler itself reads CFI through [`crate::binaries::elf::ElfReader::cfi`],
/// within its budgets). Returns the table and the bytes of CFI it came from.
pub fn compile_file(path: &std::path::Path, max_rows: usize) -> Result<(Table, usize), CfiError> {
    use object::{Object, ObjectSection};
    let bytes = std::fs::read(path).map_err(|source| CfiError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = object::File::parse(&*bytes).map_err(|source| CfiError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let (section, is_eh_frame) = match file.section_by_name(".eh_frame") {
        Some(s) => (s, true),
        None => (
            file.section_by_name(".debug_frame")
                .ok_or(CfiError::NoCfi)?,
            false,
        ),
    };
    let data = section.data().map_err(CfiError::SectionData)?;
    let table = compile(
        &CfiSection {
            bytes: data,
            addr: section.address(),
            is_eh_frame,
        },
        max_rows,
    )?;
    Ok((table, data.len()))
}

/// The row for `pc`, as the kernel finds it: the last whose `pc` is at or below.
pub fn lookup(rows: &[Row], pc: u32) -> Option<&Row> {
    let i = rows.partition_point(|r| r.pc <= pc);
    i.checked_sub(1).map(|i| &rows[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc_eh_frame() -> Option<(Vec<u8>, u64)> {
        let bytes = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").ok()?;
        let file = object::File::parse(&*bytes).ok()?;
        use object::{Object, ObjectSection};
        let s = file.section_by_name(".eh_frame")?;
        Some((s.data().ok()?.to_vec(), s.address()))
    }

    /// Check libc's table against what its code is known to do: `_start`
    /// is not in libc, but `clone3`'s child marks the end of the stack, the
    /// signal trampoline is recognised, PLT-free functions get CFA = rsp+8
    /// at their first instruction (the return address was just pushed).
    #[test]
    fn libc_table_has_the_known_rows() {
        let Some((eh, addr)) = libc_eh_frame() else {
            eprintln!("SKIPPED: no /lib/x86_64-linux-gnu/libc.so.6 to read");
            return;
        };
        let t = compile(
            &CfiSection {
                bytes: &eh,
                addr,
                is_eh_frame: true,
            },
            1 << 22,
        )
        .unwrap();
        assert!(t.rows.len() > 10_000, "{} rows", t.rows.len());
        assert!(
            t.rows.windows(2).all(|w| w[0].pc < w[1].pc),
            "sorted, one row per address"
        );
        assert!(
            t.rows.iter().any(|r| r.kind == ROW_END),
            "clone3/start_thread mark the end"
        );
        assert!(t.rows.iter().any(|r| r.kind == ROW_SIGNAL), "__restore_rt");
        assert!(t
            .rows
            .iter()
            .all(|r| r.kind & ROW_KIND_MASK <= ROW_UNSUPPORTED));
        let entries = t
            .rows
            .iter()
            .filter(|r| r.kind == ROW_CFA_RSP && r.cfa_off8 == 1)
            .count();
        assert!(entries > 1000, "function entries with CFA=rsp+8: {entries}");
    }

    /// Check the flattening: gaps get a NONE row, equal neighbours merge,
    /// overlapping ranges keep the later start.
    #[test]
    fn ranges_flatten_into_rows() {
        let rsp8 = Row {
            pc: 0,
            kind: ROW_CFA_RSP,
            rbp_slot: 0,
            cfa_off8: 1,
        };
        let rsp16 = Row {
            cfa_off8: 2,
            ..rsp8
        };
        let ranges = |v: Vec<(u32, u32, Row)>| {
            v.into_iter()
                .map(|(s, e, r)| Range::new(s, e, r))
                .collect::<Vec<_>>()
        };
        let rows = flatten(
            ranges(vec![
                (0x100, 0x104, rsp8),
                (0x104, 0x110, rsp16),
                (0x110, 0x120, rsp8),
                (0x130, 0x140, rsp8),
                (0x140, 0x150, rsp8),
            ]),
            100,
        )
        .unwrap();
        let got: Vec<(u32, u8, u16)> = rows.iter().map(|r| (r.pc, r.kind, r.cfa_off8)).collect();
        assert_eq!(
            got,
            vec![
                (0x100, 1, 1),
                (0x104, 1, 2),
                (0x110, 1, 1),
                (0x120, 0, 0),
                (0x130, 1, 1),
                (0x150, 0, 0)
            ]
        );
        assert_eq!(lookup(&rows, 0x105).unwrap().cfa_off8, 2);
        assert_eq!(lookup(&rows, 0x125).unwrap().kind, ROW_NONE);
        assert!(lookup(&rows, 0xff).is_none());
        // A 527 KiB frame (rustc's run_compiler closure): the offset's high bits ride in `kind`.
        let off8 = 540080u32 / 8;
        let big = Row {
            pc: 0,
            kind: ROW_CFA_RSP | ((off8 >> 16) << 3) as u8,
            rbp_slot: 2,
            cfa_off8: off8 as u16,
        };
        assert_eq!(big.kind & ROW_KIND_MASK, ROW_CFA_RSP);
        assert_eq!(
            (big.cfa_off8 as u32 | ((big.kind >> 3) as u32) << 16) * 8,
            540080
        );
        assert!(flatten(
            ranges((0..10u32).map(|i| (i * 16, i * 16 + 8, rsp8)).collect()),
            5
        )
        .is_err());
        // Overlaps: the later start wins at a shared address.
        let rows = flatten(
            ranges(vec![(0x100, 0x120, rsp8), (0x100, 0x108, rsp16)]),
            100,
        )
        .unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.pc, r.cfa_off8)).collect::<Vec<_>>(),
            vec![(0x100, 2), (0x120, 0)]
        );
    }

    /// Check that damaged CFI gives an error or fewer rows, never a panic.
    #[test]
    fn damaged_cfi_is_an_error_not_a_crash() {
        let Some((eh, addr)) = libc_eh_frame() else {
            eprintln!("SKIPPED: no libc to read");
            return;
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let mut bad = eh.clone();
            for _ in 0..16 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed as usize) % bad.len();
                bad[i] = (seed >> 32) as u8;
            }
            let _ = compile(
                &CfiSection {
                    bytes: &bad,
                    addr,
                    is_eh_frame: true,
                },
                1 << 22,
            );
        }
        // Cut in half: the FDEs before the cut still make a table.
        let half = compile(
            &CfiSection {
                bytes: &eh[..eh.len() / 2],
                addr,
                is_eh_frame: true,
            },
            1 << 22,
        );
        assert!(half.is_err() || half.is_ok_and(|t| !t.rows.is_empty()));
    }
}
