//! What a Ruby library is: its version, where each thread's execution
//! context is, where its VM loop lies, and the layout of the structures the
//! kernel walks and userspace reads.
//!
//! In: an [`ElfReader`] over a mapped file whose name may be libruby's
//! (`libruby-3.1.so.3.1.2`, `libruby.so.3.1`), read as an attacker wrote
//! it. Out: a [`RubyBinary`] for a Ruby this build reads, an error that
//! names the version for another Ruby, nothing for other files.
//!
//! CRuby keeps each thread's `rb_execution_context_t` in the thread-local
//! `ruby_current_ec`; a shared libruby reaches it general-dynamic, through
//! a module id ld.so writes into its GOT (the `R_X86_64_DTPMOD64`
//! relocation of that symbol) and the symbol's offset in the module's TLS
//! block (`R_X86_64_DTPOFF64`): the kernel reads the module id from that
//! GOT slot and the block from the thread's DTV. The VM loop,
//! `vm_exec_core`, is a static function libruby does not export: where the
//! file keeps a full symbol table it is found by name, else as the first
//! function `rb_vm_exec` (exported) calls whose unwind entry (FDE) is a
//! function of at least 4 KiB (3.1's vm_exec_core: 17.5 KiB; its other
//! callees are small). A misread file can only misname its own process's
//! frames: the kernel reads nothing but that process's memory, and
//! userspace names an iseq only if it has the type and fingerprint the
//! kernel read. Offsets are CRuby 3.1's structures on x86_64
//! (`rb_execution_context_t`, `rb_control_frame_t`, `rb_iseq_t`,
//! `rb_iseq_constant_body`, `RString`, `RArray`), measured on Debian's
//! 3.1.2 by reading a running script's memory
//! (`tests/oracles/ruby_layout.py`), checked against it by
//! `tests/tests/ruby.rs`.

use crate::binaries::elf::{vaddr_to_offset, ElfReader};

/// Structure offsets of one Ruby minor version (bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct RubyLayout {
    /// "3.1".
    pub version: &'static str,
    /// `rb_execution_context_t.vm_stack`.
    pub ec_vm_stack: u16,
    /// `rb_execution_context_t.vm_stack_size` (in VALUEs).
    pub ec_vm_stack_size: u16,
    /// `rb_execution_context_t.cfp`: the leaf-most control frame.
    pub ec_cfp: u16,
    /// `rb_control_frame_t.pc`.
    pub cfp_pc: u16,
    /// `rb_control_frame_t.iseq`.
    pub cfp_iseq: u16,
    /// `rb_control_frame_t.ep`.
    pub cfp_ep: u16,
    /// `sizeof(rb_control_frame_t)`.
    pub cfp_size: u16,
    /// `rb_iseq_t.body`.
    pub iseq_body: u16,
    /// `rb_iseq_constant_body.type` (an `enum iseq_type`, 4 bytes).
    pub body_type: u64,
    /// `rb_iseq_constant_body.iseq_size` (an unsigned int, in VALUEs).
    pub body_iseq_size: u64,
    /// `rb_iseq_constant_body.iseq_encoded`.
    pub body_iseq_encoded: u64,
    /// `rb_iseq_constant_body.location.pathobj` (a String, or an Array
    /// `[path, realpath]`).
    pub body_pathobj: u64,
    /// `rb_iseq_constant_body.location.label` (a String).
    pub body_label: u64,
    /// `rb_iseq_constant_body.location.first_lineno` (a Fixnum).
    pub body_first_lineno: u64,
    /// `rb_iseq_constant_body.insns_info.body`: entries
    /// `{int line_no; int node_id; rb_event_flag_t events}`.
    pub body_insns_info: u64,
    /// `insns_info.positions` (NULL once the succinct table is built).
    pub body_insns_positions: u64,
    /// `insns_info.size` (an unsigned int).
    pub body_insns_size: u64,
    /// `insns_info.succ_index_table`.
    pub body_insns_succ: u64,
    /// `sizeof(struct iseq_insn_info_entry)`.
    pub insn_info_size: u64,
    /// The body bytes read (every field above lies below).
    pub body_read: u64,
}

const LAYOUTS: [RubyLayout; 1] = [RubyLayout {
    version: "3.1",
    ec_vm_stack: 0,
    ec_vm_stack_size: 8,
    ec_cfp: 16,
    cfp_pc: 0,
    cfp_iseq: 16,
    cfp_ep: 32,
    cfp_size: 64,
    iseq_body: 16,
    body_type: 0,
    body_iseq_size: 4,
    body_iseq_encoded: 8,
    body_pathobj: 64,
    body_label: 80,
    body_first_lineno: 88,
    body_insns_info: 120,
    body_insns_positions: 128,
    body_insns_size: 136,
    body_insns_succ: 144,
    insn_info_size: 12,
    body_read: 152,
}];

/// The versions read, as said to users.
pub const SUPPORTED: &str = "3.1";

/// The layout of Ruby `version` ("3.1"), if this build knows it.
pub fn layout(version: &str) -> Option<&'static RubyLayout> {
    LAYOUTS.iter().find(|l| l.version == version)
}

/// A shared libruby: addresses in the file's address space.
#[derive(Debug)]
pub struct RubyBinary {
    /// The GOT slot ld.so writes libruby's TLS module id into.
    pub ec_module_slot: u64,
    /// `ruby_current_ec`'s offset in libruby's TLS block.
    pub ec_tls_offset: u16,
    /// The VM's loop, `vm_exec_core`: [start, end).
    pub vm_exec_core: (u64, u64),
    /// The version's layout.
    pub layout: &'static RubyLayout,
}

/// Whether a mapped file may be a shared libruby, by its name: only those
/// are read.
pub fn may_be_ruby(file_name: &str) -> bool {
    file_name.starts_with("libruby") && file_name.contains(".so")
}

/// Why a Ruby library's frames are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A version this build has no layout for.
    #[error("Ruby {0}: this build reads the frames of Ruby {SUPPORTED}")]
    Version(String),
    /// Missing or malformed what the walk needs.
    #[error("{0}")]
    Damaged(&'static str),
}

const R_X86_64_DTPMOD64: u32 = 16;
const R_X86_64_DTPOFF64: u32 = 17;
const STT_TLS: u8 = 6;
/// The largest VM-loop caller read, and the smallest loop believed.
const MAX_CALLER_BYTES: u64 = 64 << 10;
const MIN_LOOP_BYTES: u64 = 4 << 10;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The bytes of the file at address `addr`, `size` of them.
fn bytes_at(elf: &ElfReader<'_>, what: &str, addr: u64, size: u64) -> Option<Vec<u8>> {
    let offset = vaddr_to_offset(&elf.segments().ok()?, addr)?;
    elf.read_checked(what, offset, size).ok()
}

/// "3.1" from `ruby_api_version` (`const int[3]`: 3, 1, 0).
fn api_version(elf: &ElfReader<'_>, addr: u64) -> Option<String> {
    let b = bytes_at(elf, "ruby_api_version", addr, 12)?;
    let (major, minor) = (u32_at(&b, 0)?, u32_at(&b, 4)?);
    (major < 100 && minor < 100).then(|| format!("{major}.{minor}"))
}

/// `ruby_current_ec`'s TLS access: (the GOT slot of its module id, its
/// offset in the module's block), from `.dynsym` and `.rela.dyn`.
fn ec_tls(elf: &ElfReader<'_>) -> Result<(u64, u64), NotRead> {
    let damaged = NotRead::Damaged;
    let (_, syms) = elf
        .section_data(".dynsym")
        .ok()
        .flatten()
        .ok_or(damaged("no .dynsym"))?;
    let (_, names) = elf
        .section_data(".dynstr")
        .ok()
        .flatten()
        .ok_or(damaged("no .dynstr"))?;
    let wanted = b"ruby_current_ec\0";
    let index = (0..syms.len() / 24)
        .find(|&i| {
            let s = &syms[i * 24..i * 24 + 24];
            let name = u32_at(s, 0).unwrap_or(0) as usize;
            s[4] & 0xf == STT_TLS && names.get(name..name + wanted.len()) == Some(&wanted[..])
        })
        .ok_or(damaged("no thread-local ruby_current_ec"))?;
    let value = u64_at(&syms, index * 24 + 8).unwrap_or(0);
    let (_, rela) = elf
        .section_data(".rela.dyn")
        .ok()
        .flatten()
        .ok_or(damaged("no .rela.dyn"))?;
    let (mut module_slot, mut offset) = (None, None);
    for r in rela.chunks_exact(24) {
        let (at, info) = (u64_at(r, 0).unwrap_or(0), u64_at(r, 8).unwrap_or(0));
        if info >> 32 != index as u64 {
            continue;
        }
        let addend = u64_at(r, 16).unwrap_or(0);
        match info as u32 {
            R_X86_64_DTPMOD64 => module_slot = Some(at),
            R_X86_64_DTPOFF64 => offset = Some(value.wrapping_add(addend)),
            _ => {}
        }
    }
    match (module_slot, offset) {
        (Some(slot), Some(offset)) => Ok((slot, offset)),
        _ => Err(damaged(
            "ruby_current_ec is not reached through a TLS module id (DTPMOD64): its threads' frames are not read",
        )),
    }
}

/// `vm_exec_core`: by name, or the first function of at least
/// [`MIN_LOOP_BYTES`] `rb_vm_exec` (at `caller`, `size` bytes) calls.
fn vm_loop(
    elf: &ElfReader<'_>,
    named: Option<(u64, u64)>,
    caller: u64,
    size: u64,
) -> Option<(u64, u64)> {
    if let Some((start, size)) = named.filter(|&(_, n)| n > 0) {
        return Some((start, start.saturating_add(size)));
    }
    if size == 0 || size > MAX_CALLER_BYTES {
        return None;
    }
    let code = bytes_at(elf, "rb_vm_exec", caller, size)?;
    let fdes = elf.fde_ranges().ok()?;
    // A call rel32 is 0xe8 and a 32-bit displacement from the next
    // instruction; a byte 0xe8 inside another instruction gives a target
    // that is no function's start (checked against the FDEs).
    (0..code.len().saturating_sub(4))
        .filter(|&i| code[i] == 0xe8)
        .find_map(|i| {
            let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().ok()?);
            let target = caller
                .wrapping_add(i as u64 + 5)
                .wrapping_add(rel as i64 as u64);
            let at = fdes.binary_search_by_key(&target, |&(s, _)| s).ok()?;
            let (start, end) = fdes[at];
            (end - start >= MIN_LOOP_BYTES).then_some((start, end))
        })
}

/// Read what makes `elf` a shared libruby: Ok(None) for a file that is
/// none.
pub fn read(elf: &ElfReader<'_>, file_name: &str) -> Result<Option<RubyBinary>, NotRead> {
    if !may_be_ruby(file_name) {
        return Ok(None);
    }
    let symbols = elf.symbols_where(|n| {
        matches!(
            n,
            b"ruby_api_version" | b"rb_vm_exec" | b"vm_exec_core" | b"ruby_current_ec"
        )
    });
    let find = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, addr, size)| (addr, size))
    };
    let (Some((version_at, _)), Some((caller, caller_size))) =
        (find("ruby_api_version"), find("rb_vm_exec"))
    else {
        return Ok(None); // named so, but no Ruby VM in it
    };
    let version =
        api_version(elf, version_at).ok_or(NotRead::Damaged("an unreadable ruby_api_version"))?;
    let Some(layout) = layout(&version) else {
        return Err(NotRead::Version(version));
    };
    let (ec_module_slot, offset) = ec_tls(elf)?;
    let ec_tls_offset = u16::try_from(offset)
        .map_err(|_| NotRead::Damaged("ruby_current_ec lies beyond 64 KiB of its TLS block"))?;
    let vm_exec_core = vm_loop(elf, find("vm_exec_core"), caller, caller_size)
        .ok_or(NotRead::Damaged("no VM loop (vm_exec_core) found"))?;
    Ok(Some(RubyBinary {
        ec_module_slot,
        ec_tls_offset,
        vm_exec_core,
        layout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that libruby is told by name and nothing else is.
    #[test]
    fn ruby_libraries_are_told_by_their_name() {
        for name in ["libruby-3.1.so.3.1.2", "libruby.so.3.1", "libruby-3.3.so"] {
            assert!(may_be_ruby(name), "{name}");
        }
        for other in [
            "ruby",
            "ruby3.1",
            "libruby.a",
            "librubyish",
            "libperl.so.5.36",
        ] {
            assert!(!may_be_ruby(other), "{other}");
        }
    }

    /// Check that each layout's offsets fit the kernel walk's reads: the
    /// frame's fields within the RUBY_CFP_READ bytes read of it, the
    /// fingerprint's within the PY_CODE_READ bytes read of the body.
    #[test]
    fn layouts_fit_the_kernel_walk() {
        use crate::bpf::abi::{PY_CODE_READ, RUBY_CFP_READ};
        for l in &LAYOUTS {
            for word in [l.cfp_pc, l.cfp_iseq, l.cfp_ep] {
                assert!(word + 8 <= RUBY_CFP_READ, "{}: {word}", l.version);
            }
            for word in [
                l.body_iseq_encoded,
                l.body_pathobj,
                l.body_label,
                l.body_first_lineno,
            ] {
                assert!(word + 8 <= PY_CODE_READ as u64, "{}: {word}", l.version);
            }
            assert!(l.body_insns_succ + 8 <= l.body_read);
        }
    }
}
