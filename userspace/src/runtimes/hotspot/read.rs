//! Interpreted Java frames by name: a HotSpot `Method*` read from the JVM's
//! memory, and the line a bytecode pointer in it is on.
//!
//! In: a JVM's pid, where its `libjvm.so` lies and the file addresses of
//! its `gHotSpotVM*` tables ([`HotSpotSymbols`]); then the (Method*,
//! bytecode pointer) pairs the kernel read from interpreter frames. Out: a
//! [`HotSpotLayout`] (the offsets of the few fields named here, from the
//! JVM's own tables, so any JDK that exports them is read without a table
//! of versions), the interpreter's code range (for the kernel's walker),
//! and per method a [`JavaMethod`]: its name as the JVM's perf map writes
//! compiled methods (`long Hot.hotOne(int)`, so an interpreted and a
//! compiled frame of one method read the same), its source file, its line
//! table. Everything is read with `process_vm_readv`, the JVM never stopped.
//!
//! The memory is the JVM's own, and whoever runs it can write any of it:
//! every count, length and index is bounded, and a method is taken only if
//! its constant pool's class points back at that constant pool; what fails
//! is an unnamed frame, never a read outside that process.

use crate::runtimes::hotspot::binary::HotSpotSymbols;
use crate::sys::memory::read_process;

/// Most entries of one `gHotSpotVM*` table read (JDK 17 has 788 fields).
const MAX_TABLE_ENTRIES: u64 = 8192;
/// Longest type or field name compared.
const MAX_TABLE_NAME: usize = 96;
/// Longest symbol (class name, method name, signature) read.
const MAX_SYMBOL: u16 = 4096;
/// Most bytes of a line number table read.
const MAX_LINE_TABLE: usize = 16 << 10;

/// Where HotSpot's fields are, for the JVM build a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotSpotLayout {
    method_const_method: u64,
    const_method_constants: u64,
    const_method_flags: u64,
    const_method_code_size: u64,
    const_method_name_index: u64,
    const_method_signature_index: u64,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    const_method_size: u64,
    /// `ConstMethod::_has_linenumber_table`, if the JDK has it as a u2 flag.
    has_line_table: Option<u16>,
    pool_holder: u64,
    pool_length: u64,
    pool_source_file: Option<u64>,
    /// `sizeof(ConstantPool)`: its slots follow it.
    pool_size: u64,
    klass_name: u64,
    klass_constants: u64,
    symbol_length: u64,
    symbol_body: u64,
    /// Where `AbstractInterpreter::_code` (a `StubQueue*`) is, from libjvm's address 0.
    interpreter_code: u64,
    stub_buffer: u64,
    stub_limit: u64,
    /// Where the code cache's heaps are described, if this JDK says.
    code: Option<CodeCacheLayout>,
}

/// Where HotSpot describes its code cache: `CodeCache::_heaps` (a
/// `GrowableArray<CodeHeap*>*`), each heap's reserved memory and segment
/// map, and the fields of a `CodeBlob` the kernel's walker reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CodeCacheLayout {
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
    debug: Option<DebugInfoLayout>,
}

/// Where an nmethod (JDK 9-22) keeps the debug information that says, for
/// each place in its code, which methods the compiler inlined there and at
/// which bytecode: its `PcDesc` table, its scopes stream, its metadata
/// (the `Method*`s the stream names by index). Offsets are from the
/// nmethod's start unless said.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DebugInfoLayout {
    /// `CodeBlob::_size` (int): the blob's bytes.
    size: u64,
    /// `CodeBlob::_code_begin` (address).
    code_begin: u64,
    /// `nmethod::_metadata_offset` (int): the metadata's first slot.
    metadata: u64,
    /// `CompiledMethod::_scopes_data_begin` (address): the scopes stream,
    /// which the metadata ends at.
    scopes_data_begin: u64,
    /// `nmethod::_scopes_pcs_offset` (int): the `PcDesc`s, which the
    /// scopes stream ends at.
    scopes_pcs: u64,
    /// `nmethod::_dependencies_offset` (int): where the `PcDesc`s end.
    dependencies: u64,
    /// `sizeof(PcDesc)`, `PcDesc::_pc_offset`, `PcDesc::_scope_decode_offset`.
    pc_desc_size: u64,
    pc_desc_pc: u64,
    pc_desc_scope: u64,
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

fn word(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

fn half(pid: u32, addr: u64) -> Option<u16> {
    let mut b = [0u8; 2];
    read_process(pid, addr, &mut b).ok()?;
    Some(u16::from_le_bytes(b))
}

/// A NUL-terminated name of at most [`MAX_TABLE_NAME`] bytes (a longer one is none).
fn c_name(pid: u32, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut b = [0u8; MAX_TABLE_NAME + 1];
    // The name may end near the end of its mapping: read less then.
    let n = (0..4)
        .map(|i| (MAX_TABLE_NAME + 1) >> i)
        .find(|&n| read_process(pid, addr, &mut b[..n]).is_ok())?;
    let end = b[..n].iter().position(|&c| c == 0)?;
    Some(b[..end].to_vec())
}

/// The types whose fields are looked up, and the most entries of each kept
/// (JDK 17's InstanceKlass has 28): a table that lies costs bounded reads.
const WANTED_TYPES: [&[u8]; 17] = [
    b"Method",
    b"ConstMethod",
    b"ConstantPool",
    b"Klass",
    b"InstanceKlass",
    b"Symbol",
    b"AbstractInterpreter",
    b"StubQueue",
    b"CodeCache",
    b"CodeHeap",
    b"CodeBlob",
    b"VirtualSpace",
    b"GrowableArrayBase",
    b"GrowableArray<int>",
    b"CompiledMethod",
    b"nmethod",
    b"PcDesc",
];
const MAX_FIELDS_PER_TYPE: usize = 128;

/// One table of `gHotSpotVM*`: its entries' addresses until the one whose
/// name is NULL (at most [`MAX_TABLE_ENTRIES`]), each with its name, if
/// `keep` takes it.
fn table(
    pid: u32,
    first: u64,
    stride: u64,
    name_at: u64,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<Vec<(u64, Vec<u8>)>, LayoutError> {
    let mut out = Vec::new();
    for i in 0..MAX_TABLE_ENTRIES {
        let entry = first.wrapping_add(i * stride);
        let name = word(pid, entry.wrapping_add(name_at)).ok_or(LayoutError::Unreadable)?;
        if name == 0 {
            break;
        }
        if let Some(n) = c_name(pid, name).filter(|n| keep(n)) {
            out.push((entry, n));
        }
    }
    Ok(out)
}

/// Most entries of a JVM's flag table read (JDK 17 has 1,300 or so).
const MAX_FLAGS: u64 = 4096;
/// Largest `sizeof(JVMFlag)` taken for one (JDK 17: 32).
const MAX_FLAG_SIZE: u64 = 256;

/// Whether JVM `pid`'s boolean flag `name` (`-XX:+Name`) is on, read from
/// its own flag table (`JVMFlag::flags`, found through its structure
/// tables; libjvm's address 0 at `base`). Whatever set it (the command
/// line, `JAVA_TOOL_OPTIONS`, an argument file, `-XX:VMOptionsFile`), this
/// is the value the JVM runs with. [`LayoutError::NotYet`] while the JVM
/// has not filled its tables in; [`LayoutError::Missing`] if it has no
/// such flag or table.
pub fn bool_flag(
    pid: u32,
    base: u64,
    s: &HotSpotSymbols,
    name: &'static str,
) -> Result<bool, LayoutError> {
    let var = |at: u64| word(pid, base.wrapping_add(at)).ok_or(LayoutError::Unreadable);
    let (structs, stride) = (var(s.structs)?, var(s.struct_stride)?);
    let (types, type_stride) = (var(s.types)?, var(s.type_stride)?);
    if [structs, stride, types, type_stride].contains(&0) || stride > 256 || type_stride > 256 {
        return Err(LayoutError::NotYet);
    }
    let is_flag = |t: &[u8]| t == b"JVMFlag";
    let fields = table(pid, structs, stride, var(s.struct_type_name)?, is_flag)?;
    let (field_name, is_static, offset, address) = (
        var(s.struct_field_name)?,
        var(s.struct_is_static)?,
        var(s.struct_offset)?,
        var(s.struct_address)?,
    );
    // A field's offset, or a static's address, by its name.
    let field = |want: &'static str| -> Result<u64, LayoutError> {
        for (entry, _) in fields.iter().take(MAX_FIELDS_PER_TYPE) {
            let found = word(pid, entry.wrapping_add(field_name)).and_then(|p| c_name(pid, p));
            if found.as_deref() == Some(want.as_bytes()) {
                let statik = word(pid, entry.wrapping_add(is_static))
                    .ok_or(LayoutError::Unreadable)? as u32
                    != 0;
                return word(
                    pid,
                    entry.wrapping_add(if statik { address } else { offset }),
                )
                .ok_or(LayoutError::Unreadable);
            }
        }
        Err(LayoutError::Missing(want))
    };
    let (name_at, addr_at) = (field("_name")?, field("_addr")?);
    let array = word(pid, field("flags")?).ok_or(LayoutError::Unreadable)?;
    let count = word(pid, field("numFlags")?).ok_or(LayoutError::Unreadable)?;
    let sized = table(pid, types, type_stride, var(s.type_name)?, is_flag)?;
    let (entry, _) = sized.first().ok_or(LayoutError::Missing("JVMFlag"))?;
    let size = word(pid, entry.wrapping_add(var(s.type_size)?)).ok_or(LayoutError::Unreadable)?;
    if array == 0 || size == 0 || size > MAX_FLAG_SIZE || name_at + 8 > size || addr_at + 8 > size {
        return Err(LayoutError::Missing("JVMFlag::flags"));
    }
    let mut flags = vec![0u8; (count.min(MAX_FLAGS) * size) as usize];
    read_process(pid, array, &mut flags).map_err(|_| LayoutError::Unreadable)?;
    let mut wanted = name.as_bytes().to_vec();
    wanted.push(0);
    let mut seen = vec![0u8; wanted.len()];
    for f in flags.chunks_exact(size as usize) {
        let at =
            |o: u64| u64::from_le_bytes(f[o as usize..o as usize + 8].try_into().expect("8 bytes"));
        // Only as many bytes as the name and its NUL: most flags differ at once.
        if read_process(pid, at(name_at), &mut seen).is_ok() && seen == wanted {
            let mut value = [0u8; 1];
            read_process(pid, at(addr_at), &mut value).map_err(|_| LayoutError::Unreadable)?;
            return Ok(value[0] != 0);
        }
    }
    Err(LayoutError::Missing(name))
}

impl HotSpotLayout {
    /// Read the layout from JVM `pid`, whose libjvm's address 0 is at `base`.
    /// [`LayoutError::NotYet`] comes before any table is read, so asking a
    /// starting JVM again costs a few words.
    pub fn read(pid: u32, base: u64, s: &HotSpotSymbols) -> Result<HotSpotLayout, LayoutError> {
        let var = |at: u64| word(pid, base.wrapping_add(at)).ok_or(LayoutError::Unreadable);
        // The tables' places and strides are filled as the JVM starts: 0 until then.
        let places = [
            (var(s.structs)?, var(s.struct_stride)?),
            (var(s.types)?, var(s.type_stride)?),
            (var(s.int_constants)?, var(s.int_stride)?),
        ];
        if places
            .iter()
            .any(|&(first, stride)| first == 0 || stride == 0 || stride > 256)
        {
            return Err(LayoutError::NotYet);
        }
        let wanted = |t: &[u8]| WANTED_TYPES.contains(&t);
        let structs = table(
            pid,
            places[0].0,
            places[0].1,
            var(s.struct_type_name)?,
            wanted,
        )?;
        let (field_name, is_static, offset, address) = (
            var(s.struct_field_name)?,
            var(s.struct_is_static)?,
            var(s.struct_offset)?,
            var(s.struct_address)?,
        );
        // Each wanted type's fields, named once: (type, field, entry).
        let mut fields: Vec<(&[u8], Vec<u8>, u64)> = Vec::new();
        for (entry, t) in &structs {
            let ty = WANTED_TYPES
                .iter()
                .find(|w| **w == t.as_slice())
                .expect("kept only if wanted");
            if fields.iter().filter(|f| f.0 == *ty).count() >= MAX_FIELDS_PER_TYPE {
                continue;
            }
            if let Some(f) = word(pid, entry.wrapping_add(field_name)).and_then(|p| c_name(pid, p))
            {
                fields.push((ty, f, *entry));
            }
        }
        let field = |ty: &'static str, name: &'static str| -> Result<u64, LayoutError> {
            let (_, _, entry) = fields
                .iter()
                .find(|f| f.0 == ty.as_bytes() && f.1 == name.as_bytes())
                .ok_or(LayoutError::Missing(name))?;
            let statik = word(pid, entry.wrapping_add(is_static)).ok_or(LayoutError::Unreadable)?
                as u32
                != 0;
            word(
                pid,
                entry.wrapping_add(if statik { address } else { offset }),
            )
            .ok_or(LayoutError::Unreadable)
        };
        let types = table(pid, places[1].0, places[1].1, var(s.type_name)?, |t| {
            t == b"ConstMethod" || t == b"ConstantPool" || t == b"HeapBlock" || t == b"PcDesc"
        })?;
        let type_size = var(s.type_size)?;
        let size = |ty: &'static str| -> Result<u64, LayoutError> {
            let (entry, _) = types
                .iter()
                .find(|(_, t)| t.as_slice() == ty.as_bytes())
                .ok_or(LayoutError::Missing(ty))?;
            word(pid, entry.wrapping_add(type_size)).ok_or(LayoutError::Unreadable)
        };
        let ints = table(pid, places[2].0, places[2].1, var(s.int_name)?, |n| {
            n == b"ConstMethod::_has_linenumber_table"
        })?;
        let int_value = var(s.int_value)?;
        let constant = |name: &str| {
            let (entry, _) = ints.iter().find(|(_, n)| n.as_slice() == name.as_bytes())?;
            word(pid, entry.wrapping_add(int_value)).map(|v| v as u32 as i32)
        };
        // A u2 flags field holds the line table's bit through JDK 20; later
        // JDKs keep their flags otherwise, and get no lines here.
        let has_line_table = constant("ConstMethod::_has_linenumber_table")
            .and_then(|v| u16::try_from(v).ok())
            .filter(|v| v.is_power_of_two());
        // Without these, compiled frames are walked by the rows their
        // methods' prologues give (decision 21), as before.
        let code = (|| -> Result<CodeCacheLayout, LayoutError> {
            Ok(CodeCacheLayout {
                heaps: field("CodeCache", "_heaps")?.wrapping_sub(base),
                array_len: field("GrowableArrayBase", "_len")?,
                array_data: field("GrowableArray<int>", "_data")?,
                heap_memory: field("CodeHeap", "_memory")?,
                heap_segmap: field("CodeHeap", "_segmap")?,
                heap_log2_segment: field("CodeHeap", "_log2_segment_size")?,
                space_low: field("VirtualSpace", "_low")?,
                space_low_boundary: field("VirtualSpace", "_low_boundary")?,
                space_high_boundary: field("VirtualSpace", "_high_boundary")?,
                block_header: size("HeapBlock")?,
                frame_size: field("CodeBlob", "_frame_size")?,
                frame_complete: field("CodeBlob", "_frame_complete_offset")?,
                code_begin: field("CodeBlob", "_code_begin").ok(),
                method: field("CompiledMethod", "_method")
                    .or_else(|_| field("nmethod", "_method"))
                    .ok(),
                compile_id: field("nmethod", "_compile_id").ok(),
                debug: (|| -> Result<DebugInfoLayout, LayoutError> {
                    Ok(DebugInfoLayout {
                        size: field("CodeBlob", "_size")?,
                        code_begin: field("CodeBlob", "_code_begin")?,
                        metadata: field("nmethod", "_metadata_offset")?,
                        scopes_data_begin: field("CompiledMethod", "_scopes_data_begin")?,
                        scopes_pcs: field("nmethod", "_scopes_pcs_offset")?,
                        dependencies: field("nmethod", "_dependencies_offset")?,
                        pc_desc_size: size("PcDesc")?,
                        pc_desc_pc: field("PcDesc", "_pc_offset")?,
                        pc_desc_scope: field("PcDesc", "_scope_decode_offset")?,
                    })
                })()
                .ok(),
            })
        })()
        .ok();
        Ok(HotSpotLayout {
            code,
            method_const_method: field("Method", "_constMethod")?,
            const_method_constants: field("ConstMethod", "_constants")?,
            const_method_flags: field("ConstMethod", "_flags").unwrap_or(0),
            const_method_code_size: field("ConstMethod", "_code_size")?,
            const_method_name_index: field("ConstMethod", "_name_index")?,
            const_method_signature_index: field("ConstMethod", "_signature_index")?,
            const_method_size: size("ConstMethod")?,
            has_line_table: has_line_table.filter(|_| field("ConstMethod", "_flags").is_ok()),
            pool_holder: field("ConstantPool", "_pool_holder")?,
            pool_length: field("ConstantPool", "_length")?,
            pool_source_file: field("ConstantPool", "_source_file_name_index").ok(),
            pool_size: size("ConstantPool")?,
            klass_name: field("Klass", "_name")?,
            klass_constants: field("InstanceKlass", "_constants")?,
            symbol_length: field("Symbol", "_length")?,
            symbol_body: field("Symbol", "_body").or_else(|_| field("Symbol", "_body[0]"))?,
            // A static's address is this process's: kept relative to
            // libjvm, as the layout serves every JVM of this libjvm (ASLR
            // puts each one's elsewhere).
            interpreter_code: field("AbstractInterpreter", "_code")?.wrapping_sub(base),
            stub_buffer: field("StubQueue", "_stub_buffer")?,
            stub_limit: field("StubQueue", "_buffer_limit")?,
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

    /// The symbol at `sym`: its bytes, if at most [`MAX_SYMBOL`] long.
    fn symbol(&self, pid: u32, sym: u64) -> Option<Vec<u8>> {
        let len = half(pid, sym.wrapping_add(self.symbol_length))?;
        if sym == 0 || len > MAX_SYMBOL {
            return None;
        }
        let mut b = vec![0u8; len as usize];
        read_process(pid, sym.wrapping_add(self.symbol_body), &mut b).ok()?;
        Some(b)
    }

    /// The symbol of constant pool `pool`'s slot `index` (of `length`).
    fn pool_symbol(&self, pid: u32, pool: u64, index: u16, length: u64) -> Option<Vec<u8>> {
        if index == 0 || index as u64 >= length {
            return None;
        }
        let sym = word(
            pid,
            pool.wrapping_add(self.pool_size)
                .wrapping_add(8 * index as u64),
        )?;
        self.symbol(pid, sym)
    }

    /// Read the method at `method` of `pid`.
    pub fn method(&self, pid: u32, method: u64) -> Result<JavaMethod, MethodError> {
        let cm = word(pid, method.wrapping_add(self.method_const_method))
            .ok_or(MethodError::Unreadable)?;
        let mut header = vec![0u8; self.const_method_size.min(256) as usize];
        read_process(pid, cm, &mut header).map_err(|_| MethodError::Unreadable)?;
        let u16_at = |at: u64| {
            header
                .get(at as usize..at as usize + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or(MethodError::NotMethod)
        };
        let pool = header
            .get(self.const_method_constants as usize..self.const_method_constants as usize + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or(MethodError::NotMethod)?;
        let (code_size, name_index, signature_index) = (
            u16_at(self.const_method_code_size)?,
            u16_at(self.const_method_name_index)?,
            u16_at(self.const_method_signature_index)?,
        );
        let holder =
            word(pid, pool.wrapping_add(self.pool_holder)).ok_or(MethodError::Unreadable)?;
        // A method's constant pool is its class's: anything else is no method.
        if holder == 0 || word(pid, holder.wrapping_add(self.klass_constants)) != Some(pool) {
            return Err(MethodError::NotMethod);
        }
        let length = word(pid, pool.wrapping_add(self.pool_length))
            .ok_or(MethodError::Unreadable)? as u32 as u64;
        let class = word(pid, holder.wrapping_add(self.klass_name))
            .and_then(|s| self.symbol(pid, s))
            .ok_or(MethodError::NotMethod)?;
        let name = self
            .pool_symbol(pid, pool, name_index, length)
            .ok_or(MethodError::NotMethod)?;
        let signature = self
            .pool_symbol(pid, pool, signature_index, length)
            .ok_or(MethodError::NotMethod)?;
        let file = self
            .pool_source_file
            .and_then(|at| half(pid, pool.wrapping_add(at)))
            .and_then(|i| self.pool_symbol(pid, pool, i, length))
            .map(|f| String::from_utf8_lossy(&f).into_owned())
            .unwrap_or_default();
        let code_start = cm.wrapping_add(self.const_method_size);
        let flags = u16_at(self.const_method_flags).unwrap_or(0);
        let lines = match self.has_line_table {
            Some(bit) if flags & bit != 0 => {
                read_line_table(pid, code_start.wrapping_add(code_size as u64))
            }
            _ => Vec::new(),
        };
        Ok(JavaMethod {
            name: external_name(&class, &name, &signature),
            file,
            code_start,
            code_size: code_size as u32,
            lines,
        })
    }
}

impl HotSpotLayout {
    /// The debug information of the nmethod at `blob` of JVM `pid`: what
    /// says which methods its compiler inlined at each place in its code.
    /// None if this JDK does not say where it is, or what is there is no
    /// nmethod's (regions out of order, outside the blob, or larger than
    /// [`MAX_DEBUG_INFO`]).
    pub fn compiled(&self, pid: u32, blob: u64) -> Option<CompiledCode> {
        let d = self.code.as_ref()?.debug.as_ref()?;
        let fields = [
            d.size,
            d.code_begin,
            d.metadata,
            d.scopes_data_begin,
            d.scopes_pcs,
            d.dependencies,
        ];
        let len = fields.iter().max()? + 8;
        if len > 4096 || d.pc_desc_size == 0 || d.pc_desc_size > 64 {
            return None;
        }
        let mut header = vec![0u8; len as usize];
        read_process(pid, blob, &mut header).ok()?;
        let int = |at: u64| {
            i32::from_le_bytes(
                header[at as usize..at as usize + 4]
                    .try_into()
                    .expect("4 bytes"),
            )
        };
        let address = |at: u64| {
            u64::from_le_bytes(
                header[at as usize..at as usize + 8]
                    .try_into()
                    .expect("8 bytes"),
            )
        };
        let offset = |at: u64| u64::try_from(int(at)).ok().map(|o| blob + o);
        let size = u64::try_from(int(d.size)).ok()?;
        let (metadata, scopes, pcs, end) = (
            offset(d.metadata)?,
            address(d.scopes_data_begin),
            offset(d.scopes_pcs)?,
            offset(d.dependencies)?,
        );
        let code_begin = address(d.code_begin);
        let in_order = blob <= metadata && metadata <= scopes && scopes <= pcs && pcs <= end;
        if !in_order
            || end > blob.saturating_add(size)
            || end - metadata > MAX_DEBUG_INFO
            || !(blob..blob.saturating_add(size)).contains(&code_begin)
        {
            return None;
        }
        let read = |from: u64, to: u64| -> Option<Vec<u8>> {
            let mut b = vec![0u8; (to - from) as usize];
            read_process(pid, from, &mut b).ok()?;
            Some(b)
        };
        let slots = read(metadata, scopes)?;
        let stream = read(scopes, pcs)?;
        let descs = read(pcs, end)?;
        let (pc_at, scope_at) = (d.pc_desc_pc as usize, d.pc_desc_scope as usize);
        let desc_size = d.pc_desc_size as usize;
        if pc_at + 4 > desc_size || scope_at + 4 > desc_size {
            return None;
        }
        let i32_at =
            |b: &[u8], at: usize| i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        Some(CompiledCode {
            code_begin,
            pcs: descs
                .chunks_exact(desc_size)
                .map(|p| (i32_at(p, pc_at), i32_at(p, scope_at)))
                .collect(),
            stream,
            metadata: slots
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect(),
        })
    }
}

/// Most bytes of one nmethod's debug information read (metadata, scopes
/// and `PcDesc`s together; javac's largest methods have tens of KiB).
pub const MAX_DEBUG_INFO: u64 = 1 << 20;
/// Most scopes one place in compiled code is read as (HotSpot inlines 15
/// levels deep at most by default).
const MAX_INLINE_DEPTH: usize = 64;

/// One nmethod's debug information, as read: where its code begins, its
/// `PcDesc`s (code offset, scope offset), its scopes stream, its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledCode {
    /// Where its instructions begin (`PcDesc` offsets count from here).
    pub code_begin: u64,
    pcs: Vec<(i32, i32)>,
    stream: Vec<u8>,
    metadata: Vec<u64>,
}

impl CompiledCode {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.pcs.len() * 8
            + self.stream.len()
            + self.metadata.len() * 8
    }

    /// The methods running at `pc`, innermost (inlined deepest) first, each
    /// with its bytecode index (-1: its entry): as HotSpot's `ScopeDesc`s
    /// read them. A return address is described by the `PcDesc` at it; any
    /// other place (a sampled leaf) by the first after it, as HotSpot's own
    /// samplers take it (`pc_desc_near(pc + 1)`). A binary search: the
    /// `PcDesc`s are in code order (one out of order finds a wrong scope or
    /// none, never a read outside them). Empty where nothing describes
    /// `pc`, or the stream is malformed (a chain that does not go back, an
    /// index outside the metadata, a number cut short).
    pub fn scopes(&self, pc: u64, return_address: bool, out: &mut Vec<(u64, i32)>) {
        out.clear();
        if !self.read_scopes(pc, return_address, out) {
            out.clear();
        }
    }

    /// [`Self::scopes`] into `out`; false where malformed (`out` then holds
    /// what was read before).
    fn read_scopes(&self, pc: u64, return_address: bool, out: &mut Vec<(u64, i32)>) -> bool {
        let Some(rel) = pc
            .checked_sub(self.code_begin)
            .and_then(|r| i32::try_from(r).ok())
            .map(|r| {
                if return_address {
                    r
                } else {
                    r.saturating_add(1)
                }
            })
        else {
            return false;
        };
        let i = self.pcs.partition_point(|p| p.0 < rel);
        let Some(&(_, mut at)) = self.pcs.get(i) else {
            return false;
        };
        // 0 is HotSpot's serialized null: no (more) scope.
        while at > 0 && out.len() < MAX_INLINE_DEPTH {
            let mut i = at as usize;
            let (Some(sender), Some(index), Some(bci)) = (
                read_unsigned5(&self.stream, &mut i),
                read_unsigned5(&self.stream, &mut i),
                read_unsigned5(&self.stream, &mut i),
            ) else {
                return false;
            };
            let slot = (index as usize).checked_sub(1);
            let Some(&method) = slot.and_then(|s| self.metadata.get(s)).filter(|&&m| m != 0) else {
                return false;
            };
            // A bci is written +1 (InvocationEntryBci is -1).
            out.push((method, bci as i32 - 1));
            // A sender is written before its inlinees: a chain that does not go back is no chain.
            if sender as i64 >= at as i64 {
                return false;
            }
            at = sender as i32;
        }
        true
    }
}

/// One number of HotSpot's `CompressedReadStream` (UNSIGNED5, JDK 8-20):
/// bytes below 192 end it, each byte past the first weighs 64 times more,
/// five bytes at most. None where the bytes end first.
fn read_unsigned5(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut sum = 0u32;
    let mut shift = 0u32;
    for i in 0..5 {
        let v = *b.get(*at)? as u32;
        *at += 1;
        sum = sum.wrapping_add(v << shift);
        if v < 192 || i == 4 {
            break;
        }
        shift += 6;
    }
    Some(sum)
}

/// Why a method was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MethodError {
    /// Its memory could not be read.
    #[error("its memory could not be read")]
    Unreadable,
    /// What is there is no method (freed with its class, or no pointer).
    #[error("no method there")]
    NotMethod,
}

/// What names one method's interpreted frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaMethod {
    /// As HotSpot's perf map names compiled methods: `long Hot.hotOne(int)`.
    pub name: String,
    /// Its class's source file (`Hot.java`), or empty.
    pub file: String,
    /// Where its bytecodes begin in the JVM.
    pub code_start: u64,
    /// Bytes of bytecode.
    pub code_size: u32,
    /// (bytecode index, line), in the table's order.
    pub lines: Vec<(u32, u32)>,
}

impl JavaMethod {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.name.len() + self.file.len() + self.lines.len() * 8
    }

    /// Whether `bcp` points into its bytecodes.
    pub fn holds(&self, bcp: u64) -> bool {
        bcp.checked_sub(self.code_start)
            .is_some_and(|b| b < self.code_size as u64)
    }

    /// The line of the bytecode at `bcp`, as HotSpot finds it: the first
    /// entry at its index, else the last with the greatest index before it;
    /// 0 if unknown.
    pub fn line(&self, bcp: u64) -> u32 {
        let Some(bci) = bcp
            .checked_sub(self.code_start)
            .filter(|&b| b < self.code_size.max(1) as u64)
        else {
            return 0;
        };
        let mut best: Option<(u32, u32)> = None;
        for &(b, line) in &self.lines {
            if b as u64 == bci {
                return line;
            }
            if (b as u64) < bci && best.is_none_or(|(bb, _)| b >= bb) {
                best = Some((b, line));
            }
        }
        best.or(self.lines.first().copied()).map_or(0, |(_, l)| l)
    }
}

fn read_line_table(pid: u32, at: u64) -> Vec<(u32, u32)> {
    let mut buf = vec![0u8; MAX_LINE_TABLE];
    // Shorter reads where the table ends near the end of its mapping.
    let Some(n) = (0..6)
        .map(|i| MAX_LINE_TABLE >> (2 * i))
        .find(|&n| read_process(pid, at, &mut buf[..n]).is_ok())
    else {
        return Vec::new();
    };
    decode_line_table(&buf[..n])
}

/// HotSpot's compressed line number table (`CompressedLineNumberReadStream`):
/// a byte `bci_delta << 3 | line_delta` (line_delta < 8), or 0xFF and two
/// signed deltas in UNSIGNED5, until a 0 byte. A table cut short or
/// malformed keeps the pairs read before.
pub fn decode_line_table(b: &[u8]) -> Vec<(u32, u32)> {
    let mut at = 0usize;
    let signed = |v: u32| ((v >> 1) as i32) ^ -((v & 1) as i32);
    let (mut bci, mut line) = (0i64, 0i64);
    let mut out = Vec::new();
    while let Some(&first) = b.get(at) {
        at += 1;
        match first {
            0 => break,
            0xff => {
                let Some(db) = read_unsigned5(b, &mut at) else {
                    break;
                };
                let Some(dl) = read_unsigned5(b, &mut at) else {
                    break;
                };
                bci += signed(db) as i64;
                line += signed(dl) as i64;
            }
            v => {
                bci += (v >> 3) as i64;
                line += (v & 7) as i64;
            }
        }
        if !(0..=u32::MAX as i64).contains(&bci)
            || !(0..=u32::MAX as i64).contains(&line)
            || out.len() >= 1 << 16
        {
            break;
        }
        out.push((bci as u32, line as u32));
    }
    out
}

/// `java/lang/String` as Java writes it: `java.lang.String`.
fn class_name(internal: &[u8]) -> String {
    String::from_utf8_lossy(internal).replace('/', ".")
}

/// One type of a descriptor from `d[at..]`, as Java writes it, and where the next begins.
fn descriptor_type(d: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut dims = 0;
    while d.get(at) == Some(&b'[') {
        dims += 1;
        at += 1;
    }
    let (base, next) = match *d.get(at)? {
        b'B' => ("byte".to_string(), at + 1),
        b'C' => ("char".to_string(), at + 1),
        b'D' => ("double".to_string(), at + 1),
        b'F' => ("float".to_string(), at + 1),
        b'I' => ("int".to_string(), at + 1),
        b'J' => ("long".to_string(), at + 1),
        b'S' => ("short".to_string(), at + 1),
        b'Z' => ("boolean".to_string(), at + 1),
        b'V' => ("void".to_string(), at + 1),
        b'L' => {
            let end = at + d[at..].iter().position(|&c| c == b';')?;
            (class_name(&d[at + 1..end]), end + 1)
        }
        _ => return None,
    };
    Some((format!("{base}{}", "[]".repeat(dims)), next))
}

/// A method's name as `Method::external_name` writes it (and so the JVM's
/// perf map): `long Hot.hotOne(int)`. A signature that is no descriptor is
/// written as it is.
pub fn external_name(class: &[u8], name: &[u8], signature: &[u8]) -> String {
    let (class, name) = (class_name(class), String::from_utf8_lossy(name));
    let parsed = (|| {
        let mut at = 1;
        if signature.first() != Some(&b'(') {
            return None;
        }
        let mut params = Vec::new();
        while *signature.get(at)? != b')' {
            let (t, next) = descriptor_type(signature, at)?;
            params.push(t);
            at = next;
        }
        let (ret, end) = descriptor_type(signature, at + 1)?;
        (end == signature.len()).then(|| format!("{ret} {class}.{name}({})", params.join(", ")))
    })();
    parsed.unwrap_or_else(|| format!("{class}.{name}{}", String::from_utf8_lossy(signature)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bytecode_pointer_is_held_only_by_its_methods_bytecodes() {
        let m = JavaMethod {
            name: "long Hot.hotOne(int)".into(),
            file: "Hot.java".into(),
            code_start: 0x7000,
            code_size: 40,
            lines: vec![(0, 19)],
        };
        assert!(m.holds(0x7000) && m.holds(0x7027));
        // Another method's (its Method* reused after its class was unloaded).
        assert!(!m.holds(0x7028) && !m.holds(0x6fff) && !m.holds(0));
    }

    #[test]
    fn names_are_written_as_the_jvm_writes_them() {
        assert_eq!(
            external_name(b"Hot", b"hotOne", b"(I)J"),
            "long Hot.hotOne(int)"
        );
        assert_eq!(
            external_name(b"Hot", b"main", b"([Ljava/lang/String;)V"),
            "void Hot.main(java.lang.String[])"
        );
        assert_eq!(
            external_name(b"java/util/concurrent/ConcurrentHashMap", b"tabAt", b"([Ljava/util/concurrent/ConcurrentHashMap$Node;I)Ljava/util/concurrent/ConcurrentHashMap$Node;"),
            "java.util.concurrent.ConcurrentHashMap$Node java.util.concurrent.ConcurrentHashMap.tabAt(java.util.concurrent.ConcurrentHashMap$Node[], int)"
        );
        assert_eq!(
            external_name(b"A", b"f", b"([[JZ)[[D"),
            "double[][] A.f(long[][], boolean)"
        );
        // Not a descriptor: kept as it is, never a panic.
        assert_eq!(
            external_name(b"A", b"f", b"(Lunterminated"),
            "A.f(Lunterminated"
        );
        assert_eq!(external_name(b"A", b"f", b""), "A.f");
    }

    #[test]
    fn inlined_scopes_are_read_innermost_first_and_malformed_ones_refused() {
        // Offset 0 is HotSpot's null; at 1 the nmethod's own scope (no
        // sender, metadata slot 1, bci 4 written +1); at 4 an inlinee
        // (sender 1, slot 2, its entry: bci -1 written 0).
        let code = |stream: Vec<u8>| CompiledCode {
            code_begin: 0x1000,
            pcs: vec![(-1, 0), (10, 4), (20, 1), (30, 0)],
            stream,
            metadata: vec![0xa000, 0xb000],
        };
        let scopes = |c: &CompiledCode, pc: u64, return_address: bool| {
            let mut out = vec![(1, 1)];
            c.scopes(pc, return_address, &mut out);
            out
        };
        let good = code(vec![0, 0, 1, 5, 1, 2, 0]);
        assert_eq!(scopes(&good, 0x100a, true), vec![(0xb000, -1), (0xa000, 4)]);
        // A leaf: the next PcDesc's scopes, at one too; a return address
        // without its own PcDesc is taken so too.
        assert_eq!(scopes(&good, 0x100f, false), vec![(0xa000, 4)]);
        assert_eq!(scopes(&good, 0x100a, false), vec![(0xa000, 4)]);
        assert_eq!(
            scopes(&good, 0x1009, false),
            vec![(0xb000, -1), (0xa000, 4)]
        );
        assert_eq!(scopes(&good, 0x100f, true), vec![(0xa000, 4)]);
        assert_eq!(scopes(&good, 0x1019, false), Vec::new(), "a null scope");
        assert_eq!(
            scopes(&good, 0x2000, false),
            Vec::new(),
            "past the last PcDesc"
        );
        assert_eq!(scopes(&good, 0x0fff, false), Vec::new(), "before the code");
        // A sender that does not go back, a slot outside the metadata, a
        // null slot, a stream cut short: nothing, never a loop or a panic.
        assert_eq!(
            scopes(&code(vec![0, 4, 1, 5, 1, 2, 0]), 0x100a, true),
            Vec::new()
        );
        assert_eq!(
            scopes(&code(vec![0, 0, 3, 5, 1, 2, 0]), 0x100a, true),
            Vec::new()
        );
        assert_eq!(
            scopes(&code(vec![0, 0, 0, 5, 1, 2, 0]), 0x100a, true),
            Vec::new()
        );
        assert_eq!(
            scopes(&code(vec![0, 0, 1, 5, 1, 0xff]), 0x100a, true),
            Vec::new()
        );
    }

    #[test]
    fn line_tables_decode_and_lines_are_found_by_bytecode() {
        // (0, 10) (4, 12) by single bytes; (300, 9) escaped: bci +296, line -3.
        let mut t = vec![(0 << 3) | 7, (0 << 3) | 3, (4 << 3) | 2, 0xff];
        // 296 zigzag = 592: 592 = 208 + 64 * 6 → first byte 208 (≥192), then 6.
        t.extend([208, 6]);
        // -3 zigzag = 5.
        t.push(5);
        t.push(0);
        t.push(0x55); // after the end: not read
        let lines = decode_line_table(&t);
        assert_eq!(lines, vec![(0, 7), (0, 10), (4, 12), (300, 9)]);
        let m = JavaMethod {
            name: String::new(),
            file: String::new(),
            code_start: 1000,
            code_size: 400,
            lines,
        };
        assert_eq!(m.line(1000), 7, "the first entry at its index");
        assert_eq!(m.line(1003), 10, "the last of the greatest index before it");
        assert_eq!(m.line(1004), 12);
        assert_eq!(m.line(1299), 12);
        assert_eq!(m.line(1300), 9);
        assert_eq!(m.line(999), 0, "before the method");
        assert_eq!(m.line(1400), 0, "past its code");
        // Cut short, or all escapes: what was read is kept, nothing panics.
        assert_eq!(decode_line_table(&[0x0a, 0xff, 200]), vec![(1, 2)]);
        assert!(decode_line_table(&[0xff; 64]).len() <= 6);
    }
}
