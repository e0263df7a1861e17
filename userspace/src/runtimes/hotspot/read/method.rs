//! One HotSpot method read from a JVM's memory into what names its
//! interpreted frames.
//!
//! In: a JVM's pid, its [`HotSpotLayout`] and a `Method*` the kernel read
//! from an interpreter frame. Out: a [`JavaMethod`] (or why none,
//! [`MethodError`]): the method's name from its ConstMethod's name and
//! signature indexes into its constant pool and its class's name (written
//! as the JVM's perf map writes it), its class's source file, where its
//! bytecodes are and its line table. A method is taken only if its
//! constant pool's class points back at that constant pool; symbols are
//! read to [`MAX_SYMBOL`] bytes, line tables to [`MAX_LINE_TABLE`].

use super::decode::{decode_line_table, external_name};
use super::layout::HotSpotLayout;
use super::{half, word};
use crate::sys::memory::read_process;

/// Longest symbol (class name, method name, signature) read.
const MAX_SYMBOL: u16 = 4096;
/// Most bytes of a line number table read.
const MAX_LINE_TABLE: usize = 16 << 10;

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

impl HotSpotLayout {
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
