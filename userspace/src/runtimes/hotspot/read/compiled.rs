//! One nmethod's debug information read from a JVM's memory: which
//! methods its compiler inlined at each place in its code, and at which
//! bytecode.
//!
//! In: a JVM's pid, its [`HotSpotLayout`] and a code blob's address (an
//! nmethod the kernel's walker found). Out: a [`CompiledCode`] (its
//! `PcDesc`s, scopes stream and metadata, at most [`MAX_DEBUG_INFO`]
//! bytes), and from it the methods running at a pc, innermost first
//! ([`CompiledCode::scopes`]).

use super::decode::read_unsigned5;
use super::layout::HotSpotLayout;
use crate::sys::memory::read_process;

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
    pub(super) pcs: Vec<(i32, i32)>,
    pub(super) stream: Vec<u8>,
    pub(super) metadata: Vec<u64>,
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
