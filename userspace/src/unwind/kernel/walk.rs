//! The kernel's walk, done in userspace over the same rows, for the stacks
//! the kernel handed over: a process's switch-outs before its entry was
//! written (a compiler's cc1 is often gone before the agent's next drain of
//! the sideband), whose binaries' tables are in the rows array all the
//! same.
//!
//! In: the registers and stack copy of a handed-over stack, where each
//! address lies (its mapping's bias and binary, from the process's mappings
//! [`super::super::Unwinders`] keeps), and the rows array, read through
//! mappings of its chunks. Out: the stack's frames and how it ended, as
//! `ebpf/unwind.bpf.h` would have walked it, or None where the rows cannot
//! go on (a binary without a table here, JIT code, a rule no row
//! expresses), and framehop walks the whole stack instead.
//!
//! Why not framehop for all: it evaluates the binary's CFI at each address,
//! and its cache is keyed by address, which ASLR moves in every process, so
//! every new process's stacks are evaluated cold: 13-15 µs a stack beside a
//! compiler loop, the agent's largest cost there. A row is found by one
//! binary search in a table compiled once per file.

use super::rows::TableState;
use super::KernelTables;
use crate::binaries::BinaryIndex;
use crate::bpf::abi::Regs;
use crate::model::stack_end::StackEnd;
use crate::unwind::tables::{
    Row, ROW_CFA_RBP, ROW_CFA_RSP, ROW_END, ROW_KIND_MASK, ROW_PLT, ROW_SIGNAL, ROW_UNSUPPORTED,
};

/// Why a read of the stack copy failed.
enum ReadFailed {
    /// Past the copy's end: a deeper copy would have gone on.
    PastCopy,
    /// Below the stack pointer the copy starts at: the walk went wrong.
    Outside,
}

/// A word of the stack copy that starts at `sp`.
fn read_word(stack: &[u8], sp: u64, addr: u64) -> Result<u64, ReadFailed> {
    let off = addr.checked_sub(sp).ok_or(ReadFailed::Outside)?;
    let off = usize::try_from(off).map_err(|_| ReadFailed::PastCopy)?;
    let bytes = stack
        .get(off..off.saturating_add(8))
        .ok_or(ReadFailed::PastCopy)?;
    Ok(u64::from_ne_bytes(bytes.try_into().expect("8 bytes")))
}

impl KernelTables {
    /// Drop the mappings walks read rows through (see [`RowsMapping::row`]).
    ///
    /// [`RowsMapping::row`]: crate::bpf::unwind_maps::RowsMapping::row
    pub(in crate::unwind) fn unmap_row_reads(&mut self) {
        self.maps.rows.unmap_reads();
    }

    /// Walk the handed-over stack (`regs`, and `stack` copied from `regs.sp`
    /// up) over the rows, appending frames to `out` (at most `max` in
    /// all). `mapping_of` gives the bias (process address - file address)
    /// and binary of the mapping holding an address, `is_entry` whether an
    /// address is in a program's entry function (a stack that reached it is
    /// whole, whatever lies below: as framehop's walk takes it). None where
    /// the rows do not take the walk to its end; `out` may then hold part
    /// of it.
    pub(in crate::unwind) fn walk_rows(
        &mut self,
        regs: Regs,
        stack: &[u8],
        mapping_of: impl Fn(u64) -> Option<(u64, BinaryIndex)>,
        is_entry: impl Fn(u64) -> bool,
        out: &mut Vec<u64>,
        max: usize,
    ) -> Option<StackEnd> {
        let first = out.len();
        let tables = &self.tables;
        let table_of = |addr| {
            let (bias, binary) = mapping_of(addr)?;
            match tables.get(&binary)? {
                &TableState::Ready { start, len } => Some((bias, start, len)),
                _ => None,
            }
        };
        let rows = &mut self.maps.rows;
        let find_row = |start, len, pc| rows.find_row(start, len, pc);
        match walk(regs, stack, table_of, find_row, out, max) {
            None if out.len() > first && is_entry(out[out.len() - 1]) => Some(StackEnd::Root),
            end => end,
        }
    }
}

/// The walk of [`KernelTables::walk_rows`]: `table_of` gives the bias and
/// the table (first row, rows) of the mapping holding an address, `find_row`
/// a table's last row at or below a file address.
fn walk(
    regs: Regs,
    stack: &[u8],
    table_of: impl Fn(u64) -> Option<(u64, u32, u32)>,
    mut find_row: impl FnMut(u32, u32, u32) -> Option<Row>,
    out: &mut Vec<u64>,
    max: usize,
) -> Option<StackEnd> {
    let Regs {
        mut ip,
        mut sp,
        mut bp,
    } = regs;
    // 1 once ip is a return address: its call is the byte before.
    let mut return_address = 0u64;
    let read = |addr: u64| match read_word(stack, regs.sp, addr) {
        Ok(w) => Ok(w),
        Err(ReadFailed::PastCopy) => Err(Some(StackEnd::CopyExhausted)),
        Err(ReadFailed::Outside) => Err(None),
    };
    loop {
        if out.len() >= max {
            return Some(StackEnd::CopyExhausted);
        }
        let (bias, start, len) = table_of(ip)?;
        out.push(ip);
        let pc = u32::try_from(ip.wrapping_sub(return_address).wrapping_sub(bias)).ok()?;
        let row = find_row(start, len, pc)?;
        let mut slot = row.rbp_slot as u64;
        let off8 = row.cfa_off8 as u64 | ((row.kind >> 3) as u64) << 16;
        let cfa = match row.kind & ROW_KIND_MASK {
            ROW_END => return Some(StackEnd::Root),
            ROW_SIGNAL => {
                // The interrupted registers in the signal frame's ucontext
                // (rbp at +120, rsp at +160, rip at +168), as the kernel's
                // walk reads them.
                let word = |i: u64| read(sp.wrapping_add(120 + 8 * i));
                match (word(0), word(5), word(6)) {
                    (Ok(b), Ok(s), Ok(i)) => (bp, sp, ip) = (b, s, i),
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
                }
                return_address = 0;
                if ip == 0 {
                    return Some(StackEnd::Root);
                }
                continue;
            }
            ROW_CFA_RSP => sp.wrapping_add(off8 << 3),
            ROW_CFA_RBP => bp.wrapping_add(off8 << 3),
            ROW_PLT => {
                let more = if ip & 15 >= slot { 8 } else { 0 };
                slot = 0;
                sp.wrapping_add(8 + more)
            }
            // A rule no row expresses (the return address in a register, as
            // in vfork, where a parent sleeps while each child starts): cut
            // where the kernel's walk cuts.
            ROW_UNSUPPORTED => return Some(StackEnd::UnsupportedRule),
            // No rule (the kernel tries the frame pointer): framehop, which
            // reads the CFI itself, decides.
            _ => return None,
        };
        // The stack grows down: a caller's frame lies above.
        if cfa <= sp {
            return None;
        }
        let ra = match read(cfa - 8) {
            Ok(ra) => ra,
            Err(e) => return e,
        };
        if slot != 0 {
            bp = match read(cfa.wrapping_sub(slot << 3)) {
                Ok(b) => b,
                Err(e) => return e,
            };
        }
        if ra == 0 {
            return Some(StackEnd::Root);
        }
        (ip, sp, return_address) = (ra, cfa, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::tables::ROW_NONE;

    #[test]
    fn a_word_past_the_copy_is_an_exhausted_copy_and_one_below_it_no_stack() {
        let stack: Vec<u8> = (0u8..16).collect();
        let w = u64::from_ne_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(matches!(read_word(&stack, 0x1000, 0x1008), Ok(x) if x == w));
        assert!(matches!(
            read_word(&stack, 0x1000, 0x1009),
            Err(ReadFailed::PastCopy)
        ));
        assert!(matches!(
            read_word(&stack, 0x1000, 0xff8),
            Err(ReadFailed::Outside)
        ));
        assert!(matches!(
            read_word(&stack, 0x1000, u64::MAX),
            Err(ReadFailed::PastCopy)
        ));
    }

    /// One binary at BIAS, its functions at file addresses 0x100 (a leaf:
    /// CFA rsp + 8), 0x200 (CFA rsp + 24, rbp saved at CFA - 16), 0x300
    /// (a frame pointer frame: CFA rbp + 16, rbp at CFA - 16), 0x400 (the
    /// thread's entry: no return address), 0x500 (a rule no row holds),
    /// 0x600 (no rule), 0x700 (a signal trampoline), 0x800 (a PLT entry).
    const BIAS: u64 = 0x5500_0000_0000;
    const SP: u64 = 0x7ff0_0000_7000;

    fn rows() -> Vec<Row> {
        let row = |pc, kind, rbp_slot, cfa_off8| Row {
            pc,
            kind,
            rbp_slot,
            cfa_off8,
        };
        vec![
            row(0x100, ROW_CFA_RSP, 0, 1),
            row(0x200, ROW_CFA_RSP, 2, 3),
            row(0x300, ROW_CFA_RBP, 2, 2),
            row(0x400, ROW_END, 0, 0),
            row(0x500, ROW_UNSUPPORTED, 0, 0),
            row(0x600, ROW_NONE, 0, 0),
            row(0x700, ROW_SIGNAL, 0, 0),
            row(0x800, ROW_PLT, 11, 0),
            row(0x900, ROW_NONE, 0, 0),
        ]
    }

    /// A stack copy of `len` bytes from SP holding those of `words` (at
    /// their addresses) that lie in it.
    fn stack(len: usize, words: &[(u64, u64)]) -> Vec<u8> {
        let mut s = vec![0u8; len];
        for &(addr, w) in words {
            let off = (addr - SP) as usize;
            if let Some(at) = s.get_mut(off..off + 8) {
                at.copy_from_slice(&w.to_ne_bytes());
            }
        }
        s
    }

    fn walk_it(regs: Regs, stack: &[u8], max: usize) -> (Option<StackEnd>, Vec<u64>) {
        let rows = rows();
        let table_of = |addr: u64| {
            (addr >= BIAS + 0x100 && addr < BIAS + 0x900).then_some((BIAS, 0, rows.len() as u32))
        };
        let find_row = |start: u32, len: u32, pc: u32| {
            crate::unwind::tables::lookup(&rows[start as usize..(start + len) as usize], pc)
                .copied()
        };
        let mut out = Vec::new();
        let end = walk(regs, stack, table_of, find_row, &mut out, max);
        (end, out)
    }

    /// f (leaf) called from g, from h (frame pointer), from the entry.
    fn three_frames(len: usize) -> (Regs, Vec<u8>) {
        let fp = SP + 0x40;
        let words = [
            (SP, BIAS + 0x210),        // f's return address, into g
            (SP + 0x10, fp),           // g saved h's rbp at its CFA (SP + 0x20) - 16
            (SP + 0x18, BIAS + 0x310), // g's return address, into h
            (fp, 0),                   // h's caller's rbp
            (fp + 8, BIAS + 0x410),    // h's return address, into the entry
        ];
        (
            Regs {
                ip: BIAS + 0x110,
                sp: SP,
                bp: 0x1234,
            },
            stack(len, &words),
        )
    }

    #[test]
    fn a_walk_follows_each_row_kind_to_the_thread_entry() {
        let (regs, s) = three_frames(0x100);
        let (end, frames) = walk_it(regs, &s, 100);
        assert_eq!(end, Some(StackEnd::Root));
        assert_eq!(
            frames,
            [BIAS + 0x110, BIAS + 0x210, BIAS + 0x310, BIAS + 0x410]
        );
    }

    #[test]
    fn a_walk_past_the_copy_or_the_most_frames_says_the_copy_ended() {
        let (regs, s) = three_frames(0x30);
        let (end, frames) = walk_it(regs, &s, 100);
        assert_eq!(end, Some(StackEnd::CopyExhausted));
        assert_eq!(frames, [BIAS + 0x110, BIAS + 0x210, BIAS + 0x310]);
        let (regs, s) = three_frames(0x100);
        let (end, frames) = walk_it(regs, &s, 2);
        assert_eq!(end, Some(StackEnd::CopyExhausted));
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn a_walk_hands_back_what_rows_do_not_take_to_the_end() {
        // A return address outside every table: framehop decides.
        let regs = Regs {
            ip: BIAS + 0x110,
            sp: SP,
            bp: 0,
        };
        let (end, frames) = walk_it(regs, &stack(0x40, &[(SP, 0x4242)]), 100);
        assert_eq!((end, frames), (None, vec![BIAS + 0x110]));
        // No rule, or a frame whose CFA is not above its sp: the same.
        let at = |ip| Regs { ip, sp: SP, bp: 0 };
        assert_eq!(walk_it(at(BIAS + 0x610), &stack(0x40, &[]), 100).0, None);
        assert_eq!(walk_it(at(BIAS + 0x310), &stack(0x40, &[]), 100).0, None);
        // A rule no row holds is cut as the kernel cuts it.
        assert_eq!(
            walk_it(at(BIAS + 0x510), &stack(0x40, &[]), 100).0,
            Some(StackEnd::UnsupportedRule)
        );
        // A return address of 0 ends the stack.
        assert_eq!(
            walk_it(at(BIAS + 0x110), &stack(0x40, &[]), 100),
            (Some(StackEnd::Root), vec![BIAS + 0x110])
        );
    }

    #[test]
    fn a_signal_frame_gives_the_interrupted_registers_and_a_plt_entry_its_push() {
        // The trampoline at sp: the interrupted rbp, rsp and rip in its
        // ucontext; the interrupted instruction is looked up as it is.
        let interrupted_sp = SP + 0x200;
        let s = stack(
            0x300,
            &[
                (SP + 120, 0),
                (SP + 160, interrupted_sp),
                (SP + 168, BIAS + 0x100),
                (interrupted_sp, BIAS + 0x410),
            ],
        );
        let regs = Regs {
            ip: BIAS + 0x710,
            sp: SP,
            bp: 0,
        };
        let (end, frames) = walk_it(regs, &s, 100);
        assert_eq!(end, Some(StackEnd::Root));
        assert_eq!(frames, [BIAS + 0x710, BIAS + 0x100, BIAS + 0x410]);
        // A PLT entry: 8 more bytes on the stack from its 11th byte on.
        let s = stack(0x40, &[(SP, BIAS + 0x410), (SP + 8, BIAS + 0x410)]);
        let plt = |ip| Regs { ip, sp: SP, bp: 0 };
        assert_eq!(
            walk_it(plt(BIAS + 0x806), &s, 100).1,
            [BIAS + 0x806, BIAS + 0x410]
        );
        let s = stack(0x40, &[(SP + 8, BIAS + 0x410)]);
        assert_eq!(
            walk_it(plt(BIAS + 0x80b), &s, 100).1,
            [BIAS + 0x80b, BIAS + 0x410]
        );
    }
}
