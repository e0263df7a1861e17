//! Where HotSpot keeps the fields read here, for the JVM build a process
//! runs: taken from libjvm's own structure tables, so any JDK that exports
//! them is read without a table of versions.
//!
//! In: a JVM's pid, libjvm's address 0 in it and its `gHotSpotVM*`
//! variables ([`HotSpotSymbols`]). Out: a [`HotSpotLayout`] (or why none,
//! [`LayoutError`]), and through it the interpreter's code range and the
//! code cache's heaps ([`crate::bpf::abi::HotSpotCode`]) for the kernel's
//! walker.

use super::tables::VmStructs;
use super::word;
use crate::runtimes::hotspot::binary::HotSpotSymbols;
use crate::sys::memory::read_process;

/// Where HotSpot's fields are, for the JVM build a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotSpotLayout {
    pub(super) method_const_method: u64,
    pub(super) const_method_constants: u64,
    pub(super) const_method_flags: u64,
    pub(super) const_method_code_size: u64,
    pub(super) const_method_name_index: u64,
    pub(super) const_method_signature_index: u64,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    pub(super) const_method_size: u64,
    /// `ConstMethod::_has_linenumber_table`, if the JDK has it as a u2 flag.
    pub(super) has_line_table: Option<u16>,
    pub(super) pool_holder: u64,
    pub(super) pool_length: u64,
    pub(super) pool_source_file: Option<u64>,
    /// `sizeof(ConstantPool)`: its slots follow it.
    pub(super) pool_size: u64,
    pub(super) klass_name: u64,
    pub(super) klass_constants: u64,
    pub(super) symbol_length: u64,
    pub(super) symbol_body: u64,
    /// Where `AbstractInterpreter::_code` (a `StubQueue*`) is, from libjvm's address 0.
    interpreter_code: u64,
    stub_buffer: u64,
    stub_limit: u64,
    /// Where the code cache's heaps are described, if this JDK says.
    pub(super) code: Option<CodeCacheLayout>,
}

/// Where HotSpot describes its code cache: `CodeCache::_heaps` (a
/// `GrowableArray<CodeHeap*>*`), each heap's reserved memory and segment
/// map, and the fields of a `CodeBlob` the kernel's walker reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CodeCacheLayout {
    /// `CodeCache::_heaps`, from libjvm's address 0.
    heaps: u64,
    array_len: u64,
    array_data: u64,
    heap_memory: u64,
    heap_segmap: u64,
    heap_log2_segment: u64,
    space_low: u64,
    space_low_boundary: u64,
    space_high_boundary: u64,
    block_header: u64,
    frame_size: u64,
    frame_complete: u64,
    /// `CodeBlob::_code_begin` (JDK 9-22; later JDKs keep an offset).
    code_begin: Option<u64>,
    /// Where an nmethod keeps its `Method*` (`CompiledMethod::_method`
    /// through JDK 22, `nmethod::_method` after).
    method: Option<u64>,
    /// `nmethod::_compile_id`.
    compile_id: Option<u64>,
    /// Where an nmethod's debug information is (its inlined scopes), if
    /// this JDK lays it out as JDK 9-22 do.
    pub(super) debug: Option<DebugInfoLayout>,
}

/// Where an nmethod (JDK 9-22) keeps the debug information that says, for
/// each place in its code, which methods the compiler inlined there and at
/// which bytecode: its `PcDesc` table, its scopes stream, its metadata
/// (the `Method*`s the stream names by index). Offsets are from the
/// nmethod's start unless said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DebugInfoLayout {
    /// `CodeBlob::_size` (int): the blob's bytes.
    pub(super) size: u64,
    /// `CodeBlob::_code_begin` (address).
    pub(super) code_begin: u64,
    /// `nmethod::_metadata_offset` (int): the metadata's first slot.
    pub(super) metadata: u64,
    /// `CompiledMethod::_scopes_data_begin` (address): the scopes stream,
    /// which the metadata ends at.
    pub(super) scopes_data_begin: u64,
    /// `nmethod::_scopes_pcs_offset` (int): the `PcDesc`s, which the
    /// scopes stream ends at.
    pub(super) scopes_pcs: u64,
    /// `nmethod::_dependencies_offset` (int): where the `PcDesc`s end.
    pub(super) dependencies: u64,
    /// `sizeof(PcDesc)`, `PcDesc::_pc_offset`, `PcDesc::_scope_decode_offset`.
    pub(super) pc_desc_size: u64,
    pub(super) pc_desc_pc: u64,
    pub(super) pc_desc_scope: u64,
}

/// Why a JVM's layout was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// Its memory could not be read (it exited).
    #[error("its memory could not be read")]
    Unreadable,
    /// The JVM has not filled its tables yet (it is starting).
    #[error("its structure tables are not filled in yet")]
    NotYet,
    /// A field this build needs is not in its tables.
    #[error("its structure tables have no {0}")]
    Missing(&'static str),
}

impl HotSpotLayout {
    /// Read the layout from JVM `pid`, whose libjvm's address 0 is at `base`.
    /// [`LayoutError::NotYet`] comes before any table is read, so asking a
    /// starting JVM again costs a few words.
    pub fn read(pid: u32, base: u64, s: &HotSpotSymbols) -> Result<HotSpotLayout, LayoutError> {
        let t = VmStructs::read(pid, base, s)?;
        // A u2 flags field holds the line table's bit through JDK 20; later
        // JDKs keep their flags otherwise, and get no lines here.
        let has_line_table = t
            .constant("ConstMethod::_has_linenumber_table")
            .and_then(|v| u16::try_from(v).ok())
            .filter(|v| v.is_power_of_two());
        // Without these, compiled frames are walked by the rows their
        // methods' prologues give (decision 21), as before.
        let code = CodeCacheLayout::read(&t, base).ok();
        Ok(HotSpotLayout {
            code,
            method_const_method: t.field("Method", "_constMethod")?,
            const_method_constants: t.field("ConstMethod", "_constants")?,
            const_method_flags: t.field("ConstMethod", "_flags").unwrap_or(0),
            const_method_code_size: t.field("ConstMethod", "_code_size")?,
            const_method_name_index: t.field("ConstMethod", "_name_index")?,
            const_method_signature_index: t.field("ConstMethod", "_signature_index")?,
            const_method_size: t.size("ConstMethod")?,
            has_line_table: has_line_table.filter(|_| t.field("ConstMethod", "_flags").is_ok()),
            pool_holder: t.field("ConstantPool", "_pool_holder")?,
            pool_length: t.field("ConstantPool", "_length")?,
            pool_source_file: t.field("ConstantPool", "_source_file_name_index").ok(),
            pool_size: t.size("ConstantPool")?,
            klass_name: t.field("Klass", "_name")?,
            klass_constants: t.field("InstanceKlass", "_constants")?,
            symbol_length: t.field("Symbol", "_length")?,
            symbol_body: t
                .field("Symbol", "_body")
                .or_else(|_| t.field("Symbol", "_body[0]"))?,
            // A static's address is this process's: kept relative to
            // libjvm, as the layout serves every JVM of this libjvm (ASLR
            // puts each one's elsewhere).
            interpreter_code: t.field("AbstractInterpreter", "_code")?.wrapping_sub(base),
            stub_buffer: t.field("StubQueue", "_stub_buffer")?,
            stub_limit: t.field("StubQueue", "_buffer_limit")?,
        })
    }

    /// The template interpreter's code, `[start, end)`, of JVM `pid` whose
    /// libjvm's address 0 is at `base`; None before the JVM generated it (or
    /// if what is there is no range).
    pub fn interpreter(&self, pid: u32, base: u64) -> Option<(u64, u64)> {
        let queue = word(pid, base.wrapping_add(self.interpreter_code)).filter(|&q| q != 0)?;
        let start = word(pid, queue.wrapping_add(self.stub_buffer)).filter(|&s| s != 0)?;
        let limit = word(pid, queue.wrapping_add(self.stub_limit))? as u32 as i32;
        // The interpreter is ~100-300 KiB; a range of more than 16 MiB is no interpreter.
        (limit > 0 && limit <= 16 << 20).then(|| (start, start + limit as u64))
    }

    /// JVM `pid`'s code cache as the kernel's walker reads it (libjvm's
    /// address 0 at `base`): each code heap's reserved range and segment map,
    /// and where a blob keeps its frame size. None if this JDK does not say,
    /// or what is there is no code cache (a heap of more than 4 GiB, a
    /// segment not between 16 bytes and 64 KiB, a field past a blob's first
    /// KiB).
    pub fn code_cache(&self, pid: u32, base: u64) -> Option<crate::bpf::abi::HotSpotCode> {
        use crate::bpf::abi::{HotSpotCode, HotSpotHeap, HOTSPOT_HEAPS};
        let c = self.code.as_ref()?;
        let small = |at: u64| u16::try_from(at).ok().filter(|&v| v < 1024);
        let mut code = HotSpotCode {
            block_header: small(c.block_header)?,
            frame_size_at: small(c.frame_size)?,
            frame_complete_at: small(c.frame_complete)?,
            code_begin_at: c.code_begin.and_then(small).unwrap_or(0),
            method_at: c.method.and_then(small).unwrap_or(0),
            compile_id_at: c.compile_id.and_then(small).unwrap_or(0),
            ..Default::default()
        };
        let array = word(pid, base.wrapping_add(c.heaps)).filter(|&a| a != 0)?;
        let len = word(pid, array.wrapping_add(c.array_len))? as u32 as i32;
        let data = word(pid, array.wrapping_add(c.array_data))?;
        if len <= 0 || len as usize > HOTSPOT_HEAPS {
            return None;
        }
        for (i, slot) in code.heap.iter_mut().enumerate().take(len as usize) {
            let heap = word(pid, data.wrapping_add(8 * i as u64)).filter(|&h| h != 0)?;
            let memory = heap.wrapping_add(c.heap_memory);
            let low = word(pid, memory.wrapping_add(c.space_low_boundary))?;
            let end = word(pid, memory.wrapping_add(c.space_high_boundary))?;
            let segmap = word(
                pid,
                heap.wrapping_add(c.heap_segmap).wrapping_add(c.space_low),
            )?;
            let mut b = [0u8; 4];
            read_process(pid, heap.wrapping_add(c.heap_log2_segment), &mut b).ok()?;
            let log2 = u32::from_le_bytes(b);
            if low == 0
                || end <= low
                || end - low > 1 << 32
                || !(4..=16).contains(&log2)
                || segmap == 0
            {
                return None;
            }
            *slot = HotSpotHeap {
                low,
                end,
                segmap,
                log2_segment: log2,
                _pad: 0,
            };
        }
        let used = &code.heap[..len as usize];
        code.low = used.iter().map(|h| h.low).min()?;
        code.end = used.iter().map(|h| h.end).max()?;
        Some(code)
    }
}

impl CodeCacheLayout {
    /// The code cache's layout from JVM tables `t` (libjvm's address 0 at
    /// `base`); its debug information's where this JDK lays it out so.
    fn read(t: &VmStructs, base: u64) -> Result<CodeCacheLayout, LayoutError> {
        Ok(CodeCacheLayout {
            heaps: t.field("CodeCache", "_heaps")?.wrapping_sub(base),
            array_len: t.field("GrowableArrayBase", "_len")?,
            array_data: t.field("GrowableArray<int>", "_data")?,
            heap_memory: t.field("CodeHeap", "_memory")?,
            heap_segmap: t.field("CodeHeap", "_segmap")?,
            heap_log2_segment: t.field("CodeHeap", "_log2_segment_size")?,
            space_low: t.field("VirtualSpace", "_low")?,
            space_low_boundary: t.field("VirtualSpace", "_low_boundary")?,
            space_high_boundary: t.field("VirtualSpace", "_high_boundary")?,
            block_header: t.size("HeapBlock")?,
            frame_size: t.field("CodeBlob", "_frame_size")?,
            frame_complete: t.field("CodeBlob", "_frame_complete_offset")?,
            code_begin: t.field("CodeBlob", "_code_begin").ok(),
            method: t
                .field("CompiledMethod", "_method")
                .or_else(|_| t.field("nmethod", "_method"))
                .ok(),
            compile_id: t.field("nmethod", "_compile_id").ok(),
            debug: DebugInfoLayout::read(t).ok(),
        })
    }
}

impl DebugInfoLayout {
    /// Where an nmethod's debug information is, from JVM tables `t`.
    fn read(t: &VmStructs) -> Result<DebugInfoLayout, LayoutError> {
        Ok(DebugInfoLayout {
            size: t.field("CodeBlob", "_size")?,
            code_begin: t.field("CodeBlob", "_code_begin")?,
            metadata: t.field("nmethod", "_metadata_offset")?,
            scopes_data_begin: t.field("CompiledMethod", "_scopes_data_begin")?,
            scopes_pcs: t.field("nmethod", "_scopes_pcs_offset")?,
            dependencies: t.field("nmethod", "_dependencies_offset")?,
            pc_desc_size: t.size("PcDesc")?,
            pc_desc_pc: t.field("PcDesc", "_pc_offset")?,
            pc_desc_scope: t.field("PcDesc", "_scope_decode_offset")?,
        })
    }
}
