//! HotSpot as one JVM maps it.
//!
//! In: libjvm's exports ([`HotSpotSymbols`]) and where the process maps it,
//! from the runtimes registry; later the interpreter and code heaps the
//! collector reads from the JVM ([`super::read`]). Out: [`JavaRuntime`],
//! whose interpreter range and code heaps the process's kernel entry
//! carries.

use std::sync::Arc;

use super::binary::HotSpotSymbols;

/// HotSpot as one JVM maps it: what it exports, where, and where its
/// interpreter is once the collector read it ([`super::read`]).
#[derive(Debug, Clone)]
pub struct JavaRuntime {
    /// The `gHotSpotVM*` variables, as file addresses.
    pub symbols: Arc<HotSpotSymbols>,
    /// Where libjvm's address 0 lands in the process.
    pub base: u64,
    /// The template interpreter's code: the kernel reads the method of
    /// each frame in it.
    pub interpreter: Option<(u64, u64)>,
    /// Its code cache: the kernel walks compiled frames by their blobs'
    /// frame sizes.
    pub code: Option<crate::bpf::abi::HotSpotCode>,
}
