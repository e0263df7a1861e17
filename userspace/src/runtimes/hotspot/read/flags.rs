//! A JVM's boolean flags (`-XX:+Name`) read from its own flag table,
//! found through its structure tables.
//!
//! In: a JVM's pid, libjvm's address 0 in it, its `gHotSpotVM*` variables
//! ([`HotSpotSymbols`]) and a flag's name. Out: whether the flag is on, as
//! the JVM runs with it, or why that is not known ([`LayoutError`]). At
//! most [`MAX_FLAGS`] flags of at most [`MAX_FLAG_SIZE`] bytes are read.

use super::layout::LayoutError;
use super::tables::{c_name, table, MAX_FIELDS_PER_TYPE};
use super::word;
use crate::runtimes::hotspot::binary::HotSpotSymbols;
use crate::sys::memory::read_process;

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
