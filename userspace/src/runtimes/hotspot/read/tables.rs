//! libjvm's structure tables (`gHotSpotVMStructs`, `gHotSpotVMTypes`,
//! `gHotSpotVMIntConstants`) read from a JVM's memory: the tables a
//! HotSpot layout is taken from.
//!
//! In: a JVM's pid, libjvm's address 0 in it and the file addresses of its
//! `gHotSpotVM*` variables ([`HotSpotSymbols`]). Out: a table's entries by
//! name ([`table`]), and [`VmStructs`]: the fields of the few types read,
//! the sizes of a few types and the one integer constant wanted, each asked
//! for by name. Every table is read to at most [`MAX_TABLE_ENTRIES`]
//! entries and every name to [`MAX_TABLE_NAME`] bytes: tables the JVM's
//! owner wrote cost bounded reads.

use super::layout::LayoutError;
use super::word;
use crate::runtimes::hotspot::binary::HotSpotSymbols;
use crate::sys::memory::read_process;

/// Most entries of one `gHotSpotVM*` table read (JDK 17 has 788 fields).
const MAX_TABLE_ENTRIES: u64 = 8192;
/// Longest type or field name compared.
const MAX_TABLE_NAME: usize = 96;

/// A NUL-terminated name of at most [`MAX_TABLE_NAME`] bytes (a longer one is none).
pub(super) fn c_name(pid: u32, addr: u64) -> Option<Vec<u8>> {
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
pub(super) const MAX_FIELDS_PER_TYPE: usize = 128;

/// One table of `gHotSpotVM*`: its entries' addresses until the one whose
/// name is NULL (at most [`MAX_TABLE_ENTRIES`]), each with its name, if
/// `keep` takes it.
pub(super) fn table(
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

/// The entries of a JVM's structure tables a layout is read from: each
/// wanted type's fields (named once), the sizes of the few types whose
/// size is wanted, and the integer constant wanted.
pub(super) struct VmStructs {
    pid: u32,
    /// Each wanted type's fields, named once: (type, field, entry).
    fields: Vec<(&'static [u8], Vec<u8>, u64)>,
    /// Where a field entry keeps whether it is static, its offset, its address.
    is_static: u64,
    offset: u64,
    address: u64,
    /// The type entries kept, by name, and where one keeps its size.
    types: Vec<(u64, Vec<u8>)>,
    type_size: u64,
    /// The integer constant entries kept, by name, and where one keeps its value.
    ints: Vec<(u64, Vec<u8>)>,
    int_value: u64,
}

impl VmStructs {
    /// Read JVM `pid`'s tables (libjvm's address 0 at `base`).
    /// [`LayoutError::NotYet`] comes before any table is read, so asking a
    /// starting JVM again costs a few words.
    pub(super) fn read(pid: u32, base: u64, s: &HotSpotSymbols) -> Result<VmStructs, LayoutError> {
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
        let fields = wanted_fields(pid, &structs, field_name);
        let types = table(pid, places[1].0, places[1].1, var(s.type_name)?, |t| {
            t == b"ConstMethod" || t == b"ConstantPool" || t == b"HeapBlock" || t == b"PcDesc"
        })?;
        let type_size = var(s.type_size)?;
        let ints = table(pid, places[2].0, places[2].1, var(s.int_name)?, |n| {
            n == b"ConstMethod::_has_linenumber_table"
        })?;
        let int_value = var(s.int_value)?;
        Ok(VmStructs {
            pid,
            fields,
            is_static,
            offset,
            address,
            types,
            type_size,
            ints,
            int_value,
        })
    }

    /// Type `ty`'s field `name`: its offset, or a static's address.
    pub(super) fn field(&self, ty: &'static str, name: &'static str) -> Result<u64, LayoutError> {
        let pid = self.pid;
        let (_, _, entry) = self
            .fields
            .iter()
            .find(|f| f.0 == ty.as_bytes() && f.1 == name.as_bytes())
            .ok_or(LayoutError::Missing(name))?;
        let statik = word(pid, entry.wrapping_add(self.is_static)).ok_or(LayoutError::Unreadable)?
            as u32
            != 0;
        word(
            pid,
            entry.wrapping_add(if statik { self.address } else { self.offset }),
        )
        .ok_or(LayoutError::Unreadable)
    }

    /// `sizeof(ty)`.
    pub(super) fn size(&self, ty: &'static str) -> Result<u64, LayoutError> {
        let (entry, _) = self
            .types
            .iter()
            .find(|(_, t)| t.as_slice() == ty.as_bytes())
            .ok_or(LayoutError::Missing(ty))?;
        word(self.pid, entry.wrapping_add(self.type_size)).ok_or(LayoutError::Unreadable)
    }

    /// The integer constant `name`, if the tables have it.
    pub(super) fn constant(&self, name: &str) -> Option<i32> {
        let (entry, _) = self
            .ints
            .iter()
            .find(|(_, n)| n.as_slice() == name.as_bytes())?;
        word(self.pid, entry.wrapping_add(self.int_value)).map(|v| v as u32 as i32)
    }
}

/// Each wanted type's fields among the structure table's `structs`
/// entries, named once, at most [`MAX_FIELDS_PER_TYPE`] of each.
fn wanted_fields(
    pid: u32,
    structs: &[(u64, Vec<u8>)],
    field_name: u64,
) -> Vec<(&'static [u8], Vec<u8>, u64)> {
    // Each wanted type's fields, named once: (type, field, entry).
    let mut fields: Vec<(&'static [u8], Vec<u8>, u64)> = Vec::new();
    for (entry, t) in structs {
        let ty = WANTED_TYPES
            .iter()
            .find(|w| **w == t.as_slice())
            .expect("kept only if wanted");
        if fields.iter().filter(|f| f.0 == *ty).count() >= MAX_FIELDS_PER_TYPE {
            continue;
        }
        if let Some(f) = word(pid, entry.wrapping_add(field_name)).and_then(|p| c_name(pid, p)) {
            fields.push((ty, f, *entry));
        }
    }
    fields
}
